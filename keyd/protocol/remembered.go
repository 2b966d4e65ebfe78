package protocol

// Remembered approvals (issue 24). A human who approves a GRANT may ask the
// daemon to keep approving that same request for a while:
//
//	{"verb":"APPROVE","request":"r_…","match":"42","channel":"terminal","remember":"2h"}
//
// "remember" is a length in internal/duration's syntax, at most the rule's
// remember: the last of PendingView.Remember, which lists the choices an
// approver offers (a ladder of 15m, 1h, 2h, 8h below the rule's remember,
// then the rule's remember itself). PendingView.Remember is present only
// for a GRANT whose rule (and every ask rule that applies to it) allows
// remembering. The daemon never cuts a rendering; a channel that cannot
// show Text whole must not offer remembering: the desktop only when
// FitsNotification. The daemon refuses the whole APPROVE, approving and
// denying nothing (the request keeps waiting), when the request is a
// CONSENT, its rule does not allow remembering, the length is not a
// duration or is longer than the rule allows, it comes from the desktop
// for a request that does not fit a notification, or a strong rule would
// be remembered from a weak approval. Absent "remember": approve once.
//
// The grant the approval issued says so: its GrantResult has Decision
// "ask", Remembered the new approval's id and Until its end (unix s).
// Under a remembered approval, a GRANT from the same policy agent and the
// same uid, with a proof of its key (any key), whose grant as the policy
// decides it is within the approved one (services, verbs, capability
// patterns, per, spend, risk), is issued at once: Decision "remembered",
// Remembered and Until set, Approver and Channel those of the approval.
// Its expiry is cut to the rule's remember_exp from now and to the
// approval's end (on the monotonic clock too), and Narrowed says so when
// the request named a later one. Anything else is decided as if nothing
// were remembered. The rate still applies.
//
//	{"verb":"REMEMBERED"}                  (optional "holder": an agent's key)
//	→ {"kind":"REMEMBERED","data":{"remembered":[RememberedView…]}}
//
// lists them: an approver sees all, an agent only its own (same policy
// agent and same uid; "holder" names its key for an agent the policy
// matches by key). The data is an object, as PENDING's is, so that
// members may be added beside the list.
//
//	{"verb":"FORGET","request":"m_…","reason":"done for today"}
//	→ {"kind":"OK","message":"forgotten"}
//
// ends one at once (an approver, or the agent it serves); no grant under
// it leaves after the OK. An id that is not live (never was, ended
// already, or another agent's) is refused with not_found. LOCK ends all of
// them; a reload ends those whose rule no longer allows remembering, no
// longer covers the approved request, or now needs a strong channel the
// approval did not have (a reload that shortens remember shortens Until;
// none lengthens it); and each ends at its Until.

// RememberedView is one remembered approval as REMEMBERED lists it.
type RememberedView struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	UID   uint32 `json:"uid"`
	// User is the name of UID, when it has one.
	User string `json:"user,omitempty"`
	Rule string `json:"rule,omitempty"`
	// Scope is what was approved, as PendingView's: the caveats a grant
	// under it may carry at most. Its strings are the agent's, not made
	// safe for display.
	Scope Scope `json:"scope"`
	// Text is Scope rendered for a human, made safe for display, one line
	// per service, pattern or effect, as PendingView.Text.
	Text       string `json:"text" display:"lines"`
	Until      int64  `json:"until"` // unix seconds: when it ends
	ApprovedBy string `json:"approved_by"`
	Channel    string `json:"channel"`
	Started    int64  `json:"started"` // unix seconds
	Issued     int    `json:"issued"`  // grants issued under it so far
}

// RememberedList is the data of a REMEMBERED reply.
type RememberedList struct {
	Remembered []RememberedView `json:"remembered"`
}

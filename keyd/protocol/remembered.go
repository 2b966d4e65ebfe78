package protocol

// Remembered approvals (issue 24). A human who approves a GRANT may ask the
// daemon to keep approving that same request for a while:
//
//	{"verb":"APPROVE","request":"r_…","match":"42","channel":"terminal","remember":"2h"}
//
// "remember" is a length in internal/duration's syntax, at most the rule's
// remember (the last of PendingView.Remember, which lists the choices an
// approver offers). The daemon refuses the whole APPROVE, approving nothing,
// when the rule does not allow remembering, the length is longer than it
// allows, the request is a CONSENT, its rendering was cut, or a strong rule
// is approved on a weak channel. Absent "remember": approve once, as ever.
//
// Under a remembered approval, a GRANT from the same policy agent and the
// same uid, with a proof of its key, whose caveats are within the approved
// ones, is issued at once with Decision "remembered", Remembered its id and
// Until its end; each such grant lives the rule's remember_exp at most and
// never past Until.
//
//	{"verb":"REMEMBERED"}
//	→ {"kind":"REMEMBERED","data":{"remembered":[RememberedView…]}}
//
// lists them: an approver sees all, an agent only its own (same policy
// agent and same uid). The data is an object, as PENDING's is, so that
// members may be added beside the list.
//
//	{"verb":"FORGET","request":"m_…","reason":"done for today"}
//	→ {"kind":"OK","message":"forgotten"}
//
// ends one at once (an approver, or the agent that owns it); no grant under
// it is signed after the OK. An id that is not remembered (never was, or
// ended already) is refused with not_found. LOCK ends all of them, a reload
// whose policy no longer allows them ends those, and so does their end time.

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

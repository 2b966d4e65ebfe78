package protocol

// PendingView is a waiting request as the daemon rendered it for a human. It
// holds no match code: the human reads the code in the requesting terminal and
// confirms it here, so that a request racing an expected one cannot ride on
// its approval (DESIGN.md, number matching).
type PendingView struct {
	ID       string     `json:"id"`
	Kind     string     `json:"kind"` // "grant" or "consent"
	Caller   CallerView `json:"caller"`
	Agent    string     `json:"agent,omitempty"`
	Holder   string     `json:"holder"`
	Title    string     `json:"title"` // one line: "calendar-agent asks for a grant"
	Text     string     `json:"text"`  // the full rendering, already made safe for display
	Rule     string     `json:"rule,omitempty"`
	Channels []string   `json:"channels"` // where it may be approved
	Strong   bool       `json:"strong"`   // only a strong channel may approve it
	// Choices are three codes, one of them the real match code, in random
	// order: for approvers that offer buttons (the desktop notification).
	Choices []string `json:"choices"`
	// Link is the request's page on the phone, when the phone may approve
	// it and the phone page is on.
	Link    string `json:"link,omitempty"`
	Created int64  `json:"created"`
	Expires int64  `json:"expires"`
}

// CallerView is who asked, as the kernel and /proc told the daemon.
type CallerView struct {
	User string `json:"user"`
	UID  uint32 `json:"uid"`
	PID  int32  `json:"pid"`
	Exe  string `json:"exe,omitempty"`
	Unit string `json:"unit,omitempty"`
}

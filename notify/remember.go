package notify

import (
	"fmt"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
)

// RememberWords is a remember choice of a pending request (issue 24) as a
// button says it: "2 h", "15 min", "1 d". A length it cannot read stays as
// it is.
func RememberWords(choice string) string {
	d, err := duration.Parse(choice)
	if err != nil || d <= 0 {
		return choice
	}
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d d", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return duration.Format(d)
}

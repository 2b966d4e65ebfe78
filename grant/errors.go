package grant

import "errors"

// Code is a stable, machine-readable reason for a refusal. The values are the
// spec's own error codes (§7) and are wire-stable: never rename one.
type Code string

// The codes that this package returns. Verify uses only CodeUnauthorized,
// CodeForbidden, CodeConsentRequired and CodeInvalidParams; CheckConsent uses
// CodeConflict, CodeExpired and CodeInvalidParams.
const (
	// CodeUnauthorized: a missing or invalid grant or proof (§7).
	CodeUnauthorized Code = "unauthorized"
	// CodeForbidden: a valid grant that does not cover the request; Need
	// holds the caveats that blocked it (§7).
	CodeForbidden Code = "forbidden"
	// CodeConsentRequired: a COMMIT that a grant would authorize but for a
	// per, spend or risk caveat (§6.6).
	CodeConsentRequired Code = "consent_required"
	// CodeInvalidParams: malformed input from the caller, outside
	// verification (§7 invalid_params). It is the one Go name of that
	// code: the daemon's ERROR frames carry the same constant.
	CodeInvalidParams Code = "invalid_params"
	// CodeConflict: a consent request or hash that does not match the
	// proposal it names (§4.4, §6.6).
	CodeConflict Code = "conflict"
	// CodeExpired: a proposal or consent request past its expiry (§7).
	CodeExpired Code = "expired"
)

// Error is a refusal with a stable code. Every error that Verify, VerifyProof,
// CheckChain and CheckConsent return is an *Error.
type Error struct {
	Code    Code
	Message string
	// Need holds, for CodeForbidden, the caveats that blocked the request
	// (§7 need). It never holds per, spend or risk caveats: those alone
	// lead to CodeConsentRequired instead.
	Need []Caveat
	// Principal is, for CodeConsentRequired, the root issuer of the grant
	// that would authorize the COMMIT with consent: the principal to name
	// in the consent object (§6.6).
	Principal string
}

var _ error = (*Error)(nil)

// Error returns the code and the message.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// ErrMalformedToken is wrapped by every error Decode returns.
var ErrMalformedToken = errors.New("malformed grant token")

func newError(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// CodeOf returns the code of err when it is or wraps an *Error, and "" otherwise.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

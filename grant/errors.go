package grant

import "errors"

// The spec's error codes (§7) that Error.Code holds. They are wire-stable:
// never rename one. Verify returns unauthorized, forbidden,
// consent_required and invalid_params; CheckConsent conflict, expired and
// invalid_params.
const (
	// codeUnauthorized: a missing or invalid grant or proof.
	codeUnauthorized = "unauthorized"
	// codeForbidden: a valid grant that does not cover the request.
	codeForbidden = "forbidden"
	// codeConsentRequired: a COMMIT that a grant would authorize but for a
	// per, spend or risk caveat (§6.6).
	codeConsentRequired = "consent_required"
	// codeInvalidParams: malformed input from the caller, outside
	// verification.
	codeInvalidParams = "invalid_params"
	// codeConflict: a consent request or hash that does not match the
	// proposal it names (§4.4, §6.6).
	codeConflict = "conflict"
	// codeExpired: a proposal or consent request past its expiry.
	codeExpired = "expired"
)

// Error is a refusal with a stable code. Every error that Verify,
// VerifyProof, CheckChain and CheckConsent return is an *Error; a service
// reads it with errors.As and answers with its Code.
type Error struct {
	// Code is the spec's error code (§7): unauthorized, forbidden,
	// consent_required, invalid_params, conflict or expired.
	Code    string
	Message string
	// Need holds, for forbidden, the caveats that blocked the request
	// (§7 need). It never holds per, spend or risk caveats: those alone
	// lead to consent_required instead.
	Need []Caveat
	// Principal is, for consent_required, the root issuer of the grant
	// that would authorize the COMMIT with consent: the principal to name
	// in the consent object (§6.6).
	Principal string
}

var _ error = (*Error)(nil)

// Error returns the code and the message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// errMalformedToken is wrapped by every error Decode returns.
var errMalformedToken = errors.New("malformed grant token")

func newError(code, msg string) *Error { return &Error{Code: code, Message: msg} }

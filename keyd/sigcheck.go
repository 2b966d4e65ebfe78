package keyd

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"io"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// The principal's signature, checked beside the audit write (issue 25).
//
// No signature of the principal key leaves unverified (grant/sign.go): a
// signature computed with a fault can give the key away. A key service or
// an HSM checks its own signatures as they arrive; for a signer in this
// process (the file key) grant ran the check, an ed25519.Verify that costs
// about twice the signature, in sequence before the grant's record was
// written. The record does not need it: it names the grant by its id, a
// hash of the signature, and a record of a grant has never meant that the
// grant reached its requester (a requester can be gone before the reply).
// So, for a grant issued alone, the check runs while the record is being
// committed (audit.Log.AppendWhile: between the write and the fsync, the
// disk's writeback started first), and finish releases the grant only once
// both are done. With other grants in the pipeline the check runs before
// the record is queued, as before: the daemon is then busy on every core,
// the check's place does not change how long a grant takes, and under 16
// clients the overlap cost some 3 % more CPU per grant, up to 8 % in a run
// (docs/performance.md, "The signature's check beside the write"). A
// signature that fails is never released: the grant is dropped, and a
// second record of the request says so.

// checkedSigner signs one grant with the principal key and keeps what its
// check needs. It tells grant that it verifies what it signs (the
// VerifiesSignatures method), which holds for the daemon because finish
// releases no grant whose check has not returned nil.
type checkedSigner struct {
	crypto.Signer
	pub      ed25519.PublicKey // the principal key the daemon started with
	verify   func(pub ed25519.PublicKey, msg, sig []byte) bool
	signed   bool
	msg, sig []byte // what was signed, and the signature
}

// VerifiesSignatures tells grant not to check the signature again.
func (c *checkedSigner) VerifiesSignatures() {}

// grantSigner returns the signer for one grant and its check, or the
// daemon's own signer and nil when that signer checks its signatures
// itself (transit, PKCS#11).
func (s *Server) grantSigner() (crypto.Signer, *checkedSigner) {
	if _, ok := s.signer.(interface{ VerifiesSignatures() }); ok {
		return s.signer, nil
	}
	c := &checkedSigner{Signer: s.signer, pub: s.pub, verify: s.verify}
	return c, c
}

// Sign signs msg and keeps it and the signature for check. It signs once:
// a grant is one signature of the principal key, and one check answers for
// it.
func (c *checkedSigner) Sign(rand io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if c.signed {
		return nil, errors.New("keyd: a grant's signer signs once")
	}
	c.signed = true
	sig, err := c.Signer.Sign(rand, msg, opts)
	if err != nil {
		return nil, err
	}
	// The very slices grant keeps in the block and encodes: grant does
	// not change them once signed.
	c.msg, c.sig = msg, sig
	return sig, nil
}

// check returns nil when the signature Sign returned verifies against the
// principal key.
func (c *checkedSigner) check() error {
	if len(c.sig) != ed25519.SignatureSize || !c.verify(c.pub, c.msg, c.sig) {
		return errors.New("the principal key's signature does not verify")
	}
	return nil
}

// appendChecked writes rec, a grant's record, durably, with the grant's
// signature checked (check; nil when the signer checked it) while the log
// writes it. The grant may leave only when both errors are nil.
func (s *Server) appendChecked(rec audit.Record, check *checkedSigner) (seq uint64, aerr, cerr error) {
	if check == nil {
		seq, aerr = s.audit.Append(rec)
		return seq, aerr, nil
	}
	if s.issuing.Load() > 1 {
		cerr = check.check()
		seq, aerr = s.audit.Append(rec)
		return seq, aerr, cerr
	}
	seq, aerr = s.audit.AppendWhile(rec, func() { cerr = check.check() })
	return seq, aerr, cerr
}

package keystore

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/durable"
	"golang.org/x/sys/unix"
)

// The files of the principal key in the state folder.
//
// principal.key holds the private key, mode 0600 (or 0400), in one of two
// forms. Plain, three lines of text:
//
//	# parley principal key: only parley-keyd may read this file
//	# public key: ed25519:<base64url of the 32-byte public key>
//	PARLEY-PRINCIPAL-KEY-1 <base64url of the 32-byte Ed25519 seed>
//
// base64url is unpadded (RFC 4648 §5); the public key form is the one of
// §6.1. Lines starting with "#" are comments; a "# public key:" comment, when
// present, must match the key. Encrypted: exactly those bytes encrypted with
// age to a passphrase (scrypt recipient), in age's ASCII armor
// ("-----BEGIN AGE ENCRYPTED FILE-----"); binary age files are read too.
// The file can be decrypted with the age tool itself (age -d), which is the
// way to change the passphrase.
//
// principal.pub holds the public key alone ("ed25519:…" and a newline), mode
// 0644, so that `parley-keyd pubkey` needs no passphrase.
const (
	KeyFileName       = "principal.key"
	PublicKeyFileName = "principal.pub"
)

const (
	plainMagic = "PARLEY-PRINCIPAL-KEY-1 "
	armorMagic = "-----BEGIN AGE ENCRYPTED FILE-----"
	ageMagic   = "age-encryption.org/v1\n"
	maxFile    = 64 << 10 // a key file is a few hundred bytes
	maxPlain   = 1 << 10
)

// scryptLogN is the scrypt work factor (2^N) for new encrypted key
// files: age's default, about a second. Tests lower it.
var scryptLogN = 18

// onWipe, when set by a test, sees the key's page after Close has
// zeroed it.
var onWipe func(page []byte)

// ErrKeyExists is returned by Init when the state folder already holds
// a principal key: a key is never overwritten.
var ErrKeyExists = errors.New("a principal key already exists")

// ErrWrongPassphrase is returned by Load when the passphrase does not
// decrypt the key file.
var ErrWrongPassphrase = errors.New("wrong passphrase for the principal key")

// PermError says which file of the state folder is unsafe, what is
// wrong with it, and the command that fixes it.
type PermError struct {
	Path    string
	Problem string
	Fix     string
}

func (e *PermError) Error() string {
	return fmt.Sprintf("%s %s (fix: %s)", e.Path, e.Problem, e.Fix)
}

// Init creates the state folder dir (mode 0700) if needed and a new
// principal key in it, from crypto/rand, and returns the public key. An
// existing folder is accepted when CheckPerms passes. Init never
// overwrites a key: it fails with ErrKeyExists when dir already holds one.
//
// With a non-empty passphrase the key file is encrypted with age (see
// KeyFileName). The public key is also written to principal.pub.
func Init(dir string, passphrase []byte) (pub ed25519.PublicKey, err error) {
	keyPath := filepath.Join(dir, KeyFileName)
	if err := os.Mkdir(dir, 0o700); err == nil {
		// The umask may have taken bits away; make the mode exact.
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("init state folder: %w", err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("init state folder: %w", err)
	}
	if _, err := os.Lstat(keyPath); err == nil {
		return nil, fmt.Errorf("%w in %s (refusing to overwrite it)", ErrKeyExists, keyPath)
	}
	if err := CheckPerms(dir); err != nil {
		return nil, err
	}

	seed := make([]byte, ed25519.SeedSize)
	defer clear(seed)
	if _, err := io.ReadFull(rand.Reader, seed); err != nil {
		return nil, fmt.Errorf("generate principal key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	defer clear(priv)
	pub = append(ed25519.PublicKey(nil), priv.Public().(ed25519.PublicKey)...)

	plain := marshal(seed, pub)
	defer clear(plain)
	// A new file (O_EXCL): if another init raced us, its key stays and
	// ours is dropped.
	if err := writeKeyFile(dir, plain, passphrase, false); err != nil {
		return nil, err
	}
	err = writePub(dir, pub)
	if err == nil {
		err = durable.SyncDir(dir)
	}
	if err != nil {
		os.Remove(keyPath) // ours: O_EXCL created it
		return nil, fmt.Errorf("write principal key: %w", err)
	}
	return pub, nil
}

// CheckPerms returns nil only when the state folder and the key files
// in it are safe to use: dir is a folder owned by the effective uid with no
// group or other permission bits; principal.key, if present, is a regular
// file (not a symlink) owned by the effective uid with mode 0600 or 0400;
// principal.pub, if present, is a regular file owned by the effective uid
// that only its owner can write. Otherwise it returns a *PermError
// naming the path, the problem and the chmod or chown that fixes it.
func CheckPerms(dir string) error {
	euid := uint32(os.Geteuid())
	owner := userName(euid)

	// The folder may be reached through a symlink (as systemd does for
	// StateDirectory=); what counts is the folder itself.
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state folder: %w", err)
	}
	if !fi.IsDir() {
		return &PermError{dir, "is not a folder", "remove it, then run parley-keyd init"}
	}
	// Key theft: a folder others can enter or list exposes the key file to
	// any later mistake in its mode, and one others can write lets them swap
	// the key or plant a symlink.
	if uid := ownerUID(fi); uid != euid {
		return &PermError{dir, fmt.Sprintf("is owned by %s, not by %s which runs the daemon", userName(uid), owner), folderOwnerFix(dir, uid)}
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return &PermError{dir, fmt.Sprintf("has mode %04o: group or others have access", perm), "chmod 700 " + dir}
	}

	keyPath := filepath.Join(dir, KeyFileName)
	if fi, err := os.Lstat(keyPath); err == nil {
		if err := checkKeyFile(keyPath, fi, euid, owner); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("principal key: %w", err)
	}

	pubPath := filepath.Join(dir, PublicKeyFileName)
	if fi, err := os.Lstat(pubPath); err == nil {
		switch {
		case !fi.Mode().IsRegular():
			return &PermError{pubPath, "is not a regular file", "rm " + pubPath + " (the daemon writes it again)"}
		case ownerUID(fi) != euid:
			return &PermError{pubPath, fmt.Sprintf("is owned by %s, not by %s", userName(ownerUID(fi)), owner), "chown " + owner + " " + pubPath}
		case fi.Mode().Perm()&0o022 != 0:
			return &PermError{pubPath, fmt.Sprintf("has mode %04o: others can replace the public key", fi.Mode().Perm()), "chmod 644 " + pubPath}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("principal public key: %w", err)
	}
	return nil
}

// folderOwnerFix is the fix for a state folder that belongs to another
// user than the one running. Giving the folder to whoever ran the command
// would hand the daemon's key to root or to an agent (issue 20): run as
// its owner instead, or, when root owns it, give it to the daemon's user.
func folderOwnerFix(dir string, uid uint32) string {
	if uid != 0 {
		return fmt.Sprintf("run this as %s, who owns the folder (sudo -u %s parley-keyd …)", userName(uid), userName(uid))
	}
	return fmt.Sprintf("give it to the user the daemon runs as (parley-keyd when installed), alone: sudo chown parley-keyd: %s && sudo chmod 0700 %s", dir, dir)
}

func checkKeyFile(path string, fi fs.FileInfo, euid uint32, owner string) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		// Key substitution or disclosure: a symlink can point the daemon at
		// a file someone else controls.
		return &PermError{path, "is a symbolic link; the key must be a regular file in the state folder", "mv \"$(readlink -f " + path + ")\" " + path}
	case !fi.Mode().IsRegular():
		return &PermError{path, "is not a regular file", "restore the key file from a backup, or remove it and run parley-keyd init for a new key"}
	case ownerUID(fi) != euid:
		return &PermError{path, fmt.Sprintf("is owned by %s, not by %s which runs the daemon", userName(ownerUID(fi)), owner), "chown " + owner + " " + path}
	case fi.Mode().Perm() != 0o600 && fi.Mode().Perm() != 0o400:
		// Key theft: any group or other bit lets another user read (or
		// replace) the principal key.
		return &PermError{path, fmt.Sprintf("has mode %04o; it must be 0600 or 0400", fi.Mode().Perm()), "chmod 600 " + path}
	}
	return nil
}

func ownerUID(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// Load checks the state folder with CheckPerms and loads the
// principal key from it. passphrase is called only when the key file is
// encrypted; the bytes it returns are zeroed after use. Load checks the
// key against principal.pub, writing that file when it is missing.
func Load(dir string, passphrase func() ([]byte, error)) (*FileSigner, error) {
	if err := CheckPerms(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, KeyFileName)
	data, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	defer clear(data)

	plain := data
	if bytes.HasPrefix(data, []byte(armorMagic)) || bytes.HasPrefix(data, []byte(ageMagic)) {
		if passphrase == nil {
			return nil, fmt.Errorf("principal key %s is encrypted and no passphrase was given", path)
		}
		pass, err := passphrase()
		defer clear(pass)
		if err != nil {
			return nil, fmt.Errorf("read passphrase: %w", err)
		}
		plain, err = decrypt(data, pass)
		if err != nil {
			return nil, fmt.Errorf("principal key %s: %w", path, err)
		}
		defer clear(plain)
	}

	var seed [ed25519.SeedSize]byte
	defer clear(seed[:])
	comment, err := parse(plain, &seed)
	if err != nil {
		return nil, fmt.Errorf("principal key %s: %w", path, err)
	}
	s, err := newFileSigner(seed[:])
	if err != nil {
		return nil, err
	}
	if comment != nil && !comment.Equal(s.pub) {
		s.Close()
		return nil, fmt.Errorf("principal key %s: its public key comment does not match the key", path)
	}

	pubPath := filepath.Join(dir, PublicKeyFileName)
	switch stored, err := PublicKey(dir); {
	case errors.Is(err, fs.ErrNotExist):
		if err := writePub(dir, s.pub); err != nil {
			s.Close()
			return nil, fmt.Errorf("write %s: %w", pubPath, err)
		}
	case err != nil:
		s.Close()
		return nil, err
	case !stored.Equal(s.pub):
		// Someone replaced one of the two files: the daemon would announce
		// a public key other than the one it signs with.
		s.Close()
		return nil, fmt.Errorf("%s does not match the principal key in %s", pubPath, path)
	}
	return s, nil
}

// WritePublicKey writes pub into dir's principal.pub, replacing it
// atomically. It is for a principal key kept outside the state folder (a
// key service), whose public key init writes there.
func WritePublicKey(dir string, pub ed25519.PublicKey) error {
	return writePub(dir, pub)
}

// ImportSeed loads the file key as Load does and returns a copy of its
// 32-byte seed, which the caller zeroes: for init to import the key into a
// key service, so that services keep trusting the same principal.
func ImportSeed(dir string, passphrase func() ([]byte, error)) ([]byte, error) {
	s, err := Load(dir, passphrase)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]byte(nil), s.key.Seed()...), nil
}

// PublicKey returns the principal public key stored in dir's principal.pub.
// It needs no passphrase and does not read the private key.
func PublicKey(dir string) (ed25519.PublicKey, error) {
	path := filepath.Join(dir, PublicKeyFileName)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("principal public key: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return nil, fmt.Errorf("principal public key: %w", err)
	}
	pub, err := parsePub(bytes.TrimSuffix(data, []byte("\n")))
	if err != nil {
		return nil, fmt.Errorf("principal public key %s: %w", path, err)
	}
	return pub, nil
}

// FileSigner signs with the principal key loaded by Load. It implements
// crypto.Signer for pure Ed25519 only (opts.HashFunc() == 0, no context),
// the signature of §6.
//
// The key lives in one page of memory of its own, locked against swapping
// (mlock) and excluded from core dumps (MADV_DONTDUMP); Close zeroes and
// unlocks it. Copies beyond this package's reach remain: crypto/ed25519
// caches the expanded key (until the key's memory is collected after Close)
// and copies it while signing, age keeps the passphrase and plaintext in its
// own buffers while it decrypts, and Go strings made from the passphrase
// cannot be zeroed.
type FileSigner struct {
	pub      ed25519.PublicKey
	mlockErr error

	mu   sync.RWMutex
	page []byte             // the page holding the key; nil after Close
	key  ed25519.PrivateKey // page[:64]
}

var _ crypto.Signer = (*FileSigner)(nil)

func newFileSigner(seed []byte) (*FileSigner, error) {
	// The key must stay on the Go heap: crypto/ed25519 keys a cache by a
	// weak pointer to it, which memory from mmap cannot have. A page-sized
	// allocation gets a page of its own (Go's heap does not move objects),
	// so mlock and MADV_DONTDUMP cover the key and nothing else.
	page := make([]byte, os.Getpagesize())
	s := &FileSigner{page: page}
	if err := unix.Mlock(page); err != nil {
		s.mlockErr = fmt.Errorf("mlock principal key: %w", err)
	}
	_ = unix.Madvise(page, unix.MADV_DONTDUMP) // Harden also disables core dumps
	priv := ed25519.NewKeyFromSeed(seed)
	copy(page, priv)
	clear(priv)
	s.key = ed25519.PrivateKey(page[:ed25519.PrivateKeySize:ed25519.PrivateKeySize])
	s.pub = append(ed25519.PublicKey(nil), s.key[ed25519.SeedSize:]...)
	return s, nil
}

// Public returns the principal public key.
func (s *FileSigner) Public() crypto.PublicKey {
	return append(ed25519.PublicKey(nil), s.pub...)
}

// PublicKey returns the principal public key.
func (s *FileSigner) PublicKey() ed25519.PublicKey {
	return append(ed25519.PublicKey(nil), s.pub...)
}

// Sign signs message with pure Ed25519. opts must be crypto.Hash(0) (or
// *ed25519.Options with no hash and no context); rand is ignored. Sign fails
// after Close.
func (s *FileSigner) Sign(rand io.Reader, message []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts == nil || opts.HashFunc() != crypto.Hash(0) {
		return nil, errors.New("principal key signs pure Ed25519 only (opts must be crypto.Hash(0))")
	}
	if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
		return nil, errors.New("principal key does not sign with an Ed25519 context")
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.key == nil {
		return nil, errors.New("principal key signer is closed")
	}
	return ed25519.Sign(s.key, message), nil
}

// MlockError reports why the key's memory could not be locked against
// swapping, or nil. It is not fatal; the daemon should log it.
func (s *FileSigner) MlockError() error { return s.mlockErr }

// Close zeroes the key and unlocks its memory. Sign fails
// afterwards. Close is safe to call more than once.
func (s *FileSigner) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.page == nil {
		return nil
	}
	clear(s.page)
	if onWipe != nil {
		onWipe(s.page)
	}
	_ = unix.Munlock(s.page)
	s.page, s.key = nil, nil
	return nil
}

// readSecret reads the key file into a buffer the caller zeroes. It
// checks the opened file again, so a swap after CheckPerms is caught.
func readSecret(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no principal key at %s (run parley-keyd init): %w", path, err)
		}
		if errors.Is(err, syscall.ELOOP) {
			return nil, &PermError{path, "is a symbolic link; the key must be a regular file in the state folder", "mv \"$(readlink -f " + path + ")\" " + path}
		}
		return nil, fmt.Errorf("open principal key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat principal key: %w", err)
	}
	euid := uint32(os.Geteuid())
	if err := checkKeyFile(path, fi, euid, userName(euid)); err != nil {
		return nil, err
	}
	if fi.Size() > maxFile {
		return nil, fmt.Errorf("principal key %s is %d bytes, too large for a key file", path, fi.Size())
	}
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		clear(buf)
		return nil, fmt.Errorf("read principal key: %w", err)
	}
	return buf, nil
}

func marshal(seed []byte, pub ed25519.PublicKey) []byte {
	enc := base64.RawURLEncoding
	b := make([]byte, 0, 256)
	b = append(b, "# parley principal key: only parley-keyd may read this file\n# public key: "...)
	b = append(b, formatPub(pub)...)
	b = append(b, '\n')
	b = append(b, plainMagic...)
	b = enc.AppendEncode(b, seed)
	b = append(b, '\n')
	return b
}

// parse reads the plain key format into seed and returns the public
// key of the "# public key:" comment, or nil when there is none.
func parse(plain []byte, seed *[ed25519.SeedSize]byte) (ed25519.PublicKey, error) {
	var comment ed25519.PublicKey
	found := false
	for i, line := range bytes.Split(plain, []byte("\n")) {
		switch {
		case len(line) == 0:
		case bytes.HasPrefix(line, []byte("# public key: ")):
			pub, err := parsePub(line[len("# public key: "):])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			comment = pub
		case line[0] == '#':
		case bytes.HasPrefix(line, []byte(plainMagic)):
			if found {
				return nil, fmt.Errorf("line %d: a second key", i+1)
			}
			b64 := line[len(plainMagic):]
			if len(b64) != base64.RawURLEncoding.EncodedLen(ed25519.SeedSize) {
				return nil, fmt.Errorf("line %d: the seed is not 32 bytes of unpadded base64url", i+1)
			}
			if _, err := base64.RawURLEncoding.Strict().Decode(seed[:], b64); err != nil {
				return nil, fmt.Errorf("line %d: the seed is not 32 bytes of unpadded base64url", i+1)
			}
			found = true
		default:
			// Do not echo the line: it may hold key material.
			return nil, fmt.Errorf("line %d: not a parley principal key file", i+1)
		}
	}
	if !found {
		return nil, errors.New("no PARLEY-PRINCIPAL-KEY-1 line")
	}
	return comment, nil
}

func formatPub(pub ed25519.PublicKey) string {
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(pub)
}

// parsePub reads an "ed25519:" public key as grant.ParsePublicKey does:
// one spelling, and never a key of small order (DESIGN.md property 10).
// Its error is a fixed sentence: the line may hold key material.
func parsePub(s []byte) (ed25519.PublicKey, error) {
	pub, err := grant.ParsePublicKey(string(s))
	if err != nil {
		return nil, errors.New("not an ed25519: public key")
	}
	return pub, nil
}

func encrypt(plain, passphrase []byte) ([]byte, error) {
	r, err := age.NewScryptRecipient(string(passphrase))
	if err != nil {
		return nil, fmt.Errorf("encrypt principal key: %w", err)
	}
	r.SetWorkFactor(scryptLogN)
	var out bytes.Buffer
	aw := armor.NewWriter(&out)
	w, err := age.Encrypt(aw, r)
	if err != nil {
		return nil, fmt.Errorf("encrypt principal key: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return nil, fmt.Errorf("encrypt principal key: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypt principal key: %w", err)
	}
	if err := aw.Close(); err != nil {
		return nil, fmt.Errorf("encrypt principal key: %w", err)
	}
	return out.Bytes(), nil
}

// decrypt returns the plaintext in a buffer the caller zeroes.
func decrypt(data, passphrase []byte) ([]byte, error) {
	id, err := age.NewScryptIdentity(string(passphrase))
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	var src io.Reader = bytes.NewReader(data)
	if bytes.HasPrefix(data, []byte(armorMagic)) {
		src = armor.NewReader(src)
	}
	r, err := age.Decrypt(src, id)
	// scrypt's work (256 MiB at age's default factor) is garbage once
	// Decrypt has unwrapped the file key, but a daemon allocates little,
	// so nothing would collect it before Go's forced GC two minutes later
	// and the pages stay resident for three: half of the unit's MemoryMax.
	// Collect it now and hand the pages back to the kernel.
	debug.FreeOSMemory()
	if err != nil {
		if errors.Is(err, age.ErrIncorrectIdentity) {
			return nil, ErrWrongPassphrase
		}
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	buf := make([]byte, maxPlain)
	n, err := io.ReadFull(r, buf)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
	case err == nil:
		clear(buf)
		return nil, errors.New("decrypted key file is too large")
	default:
		clear(buf)
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	return buf[:n:n], nil
}

// writePub replaces principal.pub atomically.
func writePub(dir string, pub ed25519.PublicKey) error {
	return durable.ReplaceFile(filepath.Join(dir, PublicKeyFileName), []byte(formatPub(pub)+"\n"), 0o644, nil)
}

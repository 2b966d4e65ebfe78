package phone

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
	"golang.org/x/sys/unix"
)

// Files of the phone page in the daemon's state folder.
const (
	// DevicesFile holds the paired phones and the pairing links not yet
	// used, each secret only as its SHA-256 hash (0600).
	DevicesFile = "phone-devices.json"
	// devicesLock is flocked by every writer of DevicesFile, so that the
	// daemon consuming a pairing link and `parley-keyd pair` adding one never
	// lose each other's writes. It is a separate file because DevicesFile
	// is replaced by rename on every write.
	devicesLock = "phone-devices.lock"
)

// Limits on what the device file may hold. They keep the file, and the work
// of checking a credential against it, small.
const (
	MaxDevices  = 32
	MaxPairings = 8
	// maxDevicesFile bounds how much of the file is read.
	maxDevicesFile = 1 << 20
	// DefaultPairingTTL is how long a pairing link stays usable.
	DefaultPairingTTL = 10 * time.Minute
)

// Errors of the device store, for callers that choose a message.
var (
	// ErrPairingInvalid means the pairing link is unknown, used already or
	// expired. The three are not told apart, so that a guesser learns
	// nothing.
	ErrPairingInvalid = errors.New("the pairing link is unknown, used or expired")
	// ErrNoDevice means no paired phone has that name or id.
	ErrNoDevice = errors.New("no paired phone has that name or id")
	// ErrNameTaken means a paired phone or a waiting pairing link uses the
	// name already.
	ErrNameTaken = errors.New("a paired phone or a waiting pairing link already uses that name")

	// ErrCodeMismatch: the code typed is not the one the phone showed; the
	// device is removed.
	ErrCodeMismatch = errors.New("the code does not match the one the phone showed; that phone is unpaired")
)

// Device is a paired phone. Its credential lives only in the phone's cookie;
// the store keeps its SHA-256 hash.
type Device struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Hash    string `json:"hash"`
	Created int64  `json:"created"`
	// Confirmed is set once the admin has typed, where parley-keyd pair
	// runs, the code the phone showed after pairing: number matching for
	// pairing. Until then the device authenticates nothing. Attack: someone
	// who saw the pairing link (a screen, a scrollback) using it first from
	// another device; their code shows only on their device.
	Confirmed bool `json:"confirmed"`
	// Code is the confirmation code while the device waits for it.
	Code string `json:"code,omitempty"`
	// Addr is the address the device paired from.
	Addr string `json:"addr,omitempty"`
}

// Pairing is a pairing link not used yet.
type Pairing struct {
	Hash    string `json:"hash"`
	Name    string `json:"name"`
	Expires int64  `json:"expires"`
}

type devicesDoc struct {
	Version  int       `json:"version"`
	Pairings []Pairing `json:"pairings"`
	Devices  []Device  `json:"devices"`
}

// Devices is the store of paired phones in a state folder. It holds no
// state in memory: every method reads the file, so a revocation by
// `parley-keyd devices revoke` takes effect at the daemon's next request, and
// a pairing link made while the daemon runs works at once.
type Devices struct {
	dir string
}

// OpenDevices returns the device store of the state folder dir. The file is
// created on the first write.
func OpenDevices(dir string) *Devices { return &Devices{dir: dir} }

// Path is the device file's path.
func (d *Devices) Path() string { return filepath.Join(d.dir, DevicesFile) }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$`)

// ValidName reports whether name may name a device: 1 to 32 letters, digits,
// dots, dashes and underscores, starting with a letter or digit. Names are
// shown on terminals and written to the audit log, so nothing else is allowed.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// NewPairing stores a one-time pairing link for a phone to be called name
// (a free "phone-N" when name is empty), usable until now+ttl, and returns
// its token and the name. Only the token's hash is stored.
func (d *Devices) NewPairing(name string, ttl time.Duration, now time.Time) (token, chosen string, err error) {
	if ttl <= 0 || ttl > 24*time.Hour {
		return "", "", fmt.Errorf("the pairing link's lifetime must be between 1s and 24h, not %v", ttl)
	}
	if name != "" && !ValidName(name) {
		return "", "", fmt.Errorf("device name %q: use 1 to 32 letters, digits, '.', '-' or '_'", name)
	}
	token = randomToken()
	err = d.update(now, func(doc *devicesDoc) error {
		if len(doc.Devices) >= MaxDevices {
			return fmt.Errorf("%d phones are paired already; revoke one first", len(doc.Devices))
		}
		if len(doc.Pairings) >= MaxPairings {
			return fmt.Errorf("%d pairing links are waiting already; use them or let them expire", len(doc.Pairings))
		}
		if name == "" {
			for i := 1; ; i++ {
				if n := fmt.Sprintf("phone-%d", i); !doc.nameUsed(n) {
					name = n
					break
				}
			}
		} else if doc.nameUsed(name) {
			return fmt.Errorf("%q: %w", name, ErrNameTaken)
		}
		doc.Pairings = append(doc.Pairings, Pairing{Hash: hashSecret(token), Name: name, Expires: now.Add(ttl).Unix()})
		return nil
	})
	if err != nil {
		return "", "", err
	}
	return token, name, nil
}

// Pair consumes the pairing link token and creates the device it names,
// returning the device and its new credential (for the phone's cookie). A
// token works once, and only before it expires.
func (d *Devices) Pair(token, addr string, now time.Time) (Device, string, error) {
	var dev Device
	cred := randomToken()
	err := d.update(now, func(doc *devicesDoc) error {
		// update dropped the expired links already. Compare every hash in
		// constant time: the token is a secret.
		h := hashSecret(token)
		i := slices.IndexFunc(doc.Pairings, func(p Pairing) bool { return secretEqual(p.Hash, h) })
		if i < 0 || token == "" || len(token) > 128 {
			return ErrPairingInvalid
		}
		p := doc.Pairings[i]
		// One-time: the link is gone whatever happens next.
		doc.Pairings = slices.Delete(doc.Pairings, i, i+1)
		if len(doc.Devices) >= MaxDevices {
			return fmt.Errorf("%d phones are paired already; revoke one first", len(doc.Devices))
		}
		dev = Device{ID: newDeviceID(), Name: p.Name, Hash: hashSecret(cred), Created: now.Unix(),
			Code: confirmCode(), Addr: addr}
		doc.Devices = append(doc.Devices, dev)
		return nil
	})
	if err != nil {
		return Device{}, "", err
	}
	return dev, cred, nil
}

// pairingName returns the device name of the pairing link token when it is
// usable at now, without using it up.
func (d *Devices) pairingName(token string, now time.Time) (string, bool) {
	if token == "" || len(token) > 128 {
		return "", false
	}
	doc, err := d.read()
	if err != nil {
		return "", false
	}
	doc.prune(now)
	h := hashSecret(token)
	name, ok := "", false
	for _, p := range doc.Pairings {
		if secretEqual(p.Hash, h) {
			name, ok = p.Name, true
		}
	}
	return name, ok
}

// Authenticate returns the paired device whose credential is cred. It reads
// the file on every call, so a revoked device is refused at once.
func (d *Devices) Authenticate(cred string) (Device, bool, error) {
	if cred == "" || len(cred) > 128 {
		return Device{}, false, nil
	}
	doc, err := d.read()
	if err != nil {
		return Device{}, false, err
	}
	h := hashSecret(cred)
	var found Device
	ok := false
	for _, dev := range doc.Devices {
		if secretEqual(dev.Hash, h) {
			found, ok = dev, dev.Confirmed
		}
	}
	return found, ok, nil
}

// Confirm finishes pairing the device named nameOrID with the code its page
// showed. A wrong code removes the device: it may not be the admin's phone,
// and a guess must not be retried.
func (d *Devices) Confirm(nameOrID, code string, now time.Time) (Device, error) {
	var dev Device
	err := d.update(now, func(doc *devicesDoc) error {
		i := slices.IndexFunc(doc.Devices, func(x Device) bool {
			return !x.Confirmed && (x.ID == nameOrID || x.Name == nameOrID)
		})
		if i < 0 {
			return fmt.Errorf("%q: %w waiting for confirmation", nameOrID, ErrNoDevice)
		}
		if subtle.ConstantTimeCompare([]byte(code), []byte(doc.Devices[i].Code)) != 1 {
			doc.Devices = slices.Delete(doc.Devices, i, i+1)
			return errCodeMismatchCommit
		}
		doc.Devices[i].Confirmed, doc.Devices[i].Code = true, ""
		dev = doc.Devices[i]
		return nil
	})
	if errors.Is(err, errCodeMismatchCommit) {
		return Device{}, ErrCodeMismatch
	}
	return dev, err
}

// errCodeMismatchCommit makes update write the removal and still report the
// mismatch.
var errCodeMismatchCommit = errors.New("code mismatch (commit)")

// confirmTTL is how long a paired device may wait for its confirmation.
const confirmTTL = DefaultPairingTTL

// confirmCode returns a four-digit confirmation code.
func confirmCode() string {
	n, err := rand.Int(rand.Reader, big.NewInt(9000))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return fmt.Sprint(1000 + n.Int64())
}

// List returns the paired devices, oldest first, and the pairing links still
// waiting at now.
func (d *Devices) List(now time.Time) ([]Device, []Pairing, error) {
	doc, err := d.read()
	if err != nil {
		return nil, nil, err
	}
	doc.prune(now)
	return doc.Devices, doc.Pairings, nil
}

// Revoke removes the paired device whose id or name is nameOrID, and returns
// it. Its credential stops working at the daemon's next request.
func (d *Devices) Revoke(nameOrID string, now time.Time) (Device, error) {
	var gone Device
	err := d.update(now, func(doc *devicesDoc) error {
		i := slices.IndexFunc(doc.Devices, func(dev Device) bool { return dev.ID == nameOrID || dev.Name == nameOrID })
		if i < 0 {
			return fmt.Errorf("%q: %w", nameOrID, ErrNoDevice)
		}
		gone = doc.Devices[i]
		doc.Devices = slices.Delete(doc.Devices, i, i+1)
		return nil
	})
	return gone, err
}

func (doc *devicesDoc) nameUsed(name string) bool {
	return slices.ContainsFunc(doc.Devices, func(d Device) bool { return d.Name == name }) ||
		slices.ContainsFunc(doc.Pairings, func(p Pairing) bool { return p.Name == name })
}

func (doc *devicesDoc) prune(now time.Time) {
	doc.Pairings = slices.DeleteFunc(doc.Pairings, func(p Pairing) bool { return p.Expires <= now.Unix() })
	doc.Devices = slices.DeleteFunc(doc.Devices, func(dv Device) bool {
		return !dv.Confirmed && dv.Created+int64(confirmTTL/time.Second) <= now.Unix()
	})
}

// read loads the file; a missing file is an empty store. Writers replace the
// file by rename, so a reader never sees half a write and needs no lock.
func (d *Devices) read() (*devicesDoc, error) {
	f, err := os.Open(d.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return &devicesDoc{Version: 1}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDevicesFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDevicesFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", d.Path(), maxDevicesFile)
	}
	var doc devicesDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Path(), err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: unknown version %d", d.Path(), doc.Version)
	}
	return &doc, nil
}

// update runs fn on the file's contents under an exclusive flock and writes
// the result back atomically when fn succeeds.
func (d *Devices) update(now time.Time, fn func(*devicesDoc) error) error {
	unlock, err := lockState(d.dir)
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := d.read()
	if err != nil {
		return err
	}
	doc.prune(now)
	ferr := fn(doc)
	if ferr != nil && !errors.Is(ferr, errCodeMismatchCommit) {
		return ferr
	}
	if doc.Devices == nil {
		doc.Devices = []Device{}
	}
	if doc.Pairings == nil {
		doc.Pairings = []Pairing{}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := replaceOwned(d.dir, DevicesFile, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return ferr
}

// lockState takes the exclusive flock that serializes writers of the phone
// page's files in the state folder dir, across processes.
func lockState(dir string) (unlock func(), err error) {
	lock, err := os.OpenFile(filepath.Join(dir, devicesLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	matchOwner(dir, lock.Name())
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	// Closing the file releases the lock.
	return func() { lock.Close() }, nil
}

// matchOwner gives path the owner of the folder dir when running as root.
// Elsewhere it does nothing: a user can only make files of their own.
func matchOwner(dir, path string) {
	if os.Geteuid() != 0 {
		return
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		os.Lchown(path, int(st.Uid), int(st.Gid))
	}
}

// randomToken returns 32 random bytes as unpadded base64url.
func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

var deviceIDEncoding = base32.NewEncoding("abcdefghijkmnpqrstuvwxyz23456789").WithPadding(base32.NoPadding)

func newDeviceID() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "d_" + deviceIDEncoding.EncodeToString(b[:])
}

// hashSecret is the stored form of a token or credential: its SHA-256, as
// unpadded base64url.
func hashSecret(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func secretEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// PairingLink is the address a phone opens to pair: the phone page's base
// URL, "/pair", and the token as the query parameter t. The page it opens
// asks before pairing, so a link previewer that fetches it uses nothing up.
func PairingLink(base, token string) string {
	return strings.TrimRight(base, "/") + "/pair?t=" + token
}

// replaceOwned replaces dir/name durably and gives the file the state
// folder's owner, so that files made by root through `parley-keyd pair`
// stay usable by the daemon's user.
func replaceOwned(dir, name string, data []byte, mode os.FileMode) error {
	return durable.ReplaceFile(filepath.Join(dir, name), data, mode, func(tmp string) { matchOwner(dir, tmp) })
}

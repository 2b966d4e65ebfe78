package filetrust

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// accounts is what /etc/passwd and /etc/group say about who is in which
// group.
type accounts struct {
	ok      bool                // both files were read
	uids    map[string]uint32   // user name → uid
	primary map[uint32][]uint32 // gid → uids whose primary group it is
	members map[uint32][]string // gid → member names listed in /etc/group
	listed  map[uint32]bool     // gids /etc/group has a line for
}

// Where the account lists are; a test may point them elsewhere.
var passwdFile, groupFile = "/etc/passwd", "/etc/group"

func readAccounts() *accounts {
	a := &accounts{uids: map[string]uint32{}, primary: map[uint32][]uint32{}, members: map[uint32][]string{}, listed: map[uint32]bool{}}
	pw, err1 := os.ReadFile(passwdFile)
	gr, err2 := os.ReadFile(groupFile)
	a.ok = err1 == nil && err2 == nil
	eachLine(pw, func(f []string) {
		if len(f) < 4 {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return
		}
		a.uids[f[0]] = uint32(uid)
		a.primary[uint32(gid)] = append(a.primary[uint32(gid)], uint32(uid))
	})
	eachLine(gr, func(f []string) {
		if len(f) < 4 {
			return
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return
		}
		a.listed[uint32(gid)] = true
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				a.members[uint32(gid)] = append(a.members[uint32(gid)], m)
			}
		}
	})
	return a
}

func eachLine(b []byte, fn func(fields []string)) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
}

// otherMember says, as "whose members include calbot", that group gid has a
// member who is not trusted, or returns "" when every member is. Fail
// closed: when the lists cannot be read, when gid has no line in
// /etc/group, or when a listed member has no uid, who is in the group
// cannot be known, and the answer says so.
func (a *accounts) otherMember(gid uint32, trusted func(uint32) bool) string {
	if !a.ok || !a.listed[gid] {
		return "whose members cannot be known (it is not in /etc/group)"
	}
	for _, uid := range a.primary[gid] {
		if !trusted(uid) {
			return "whose members include " + userName(uid)
		}
	}
	for _, m := range a.members[gid] {
		uid, ok := a.uids[m]
		if !ok {
			return "whose members include " + m + ", who is not in /etc/passwd"
		}
		if !trusted(uid) {
			return "whose members include " + m
		}
	}
	return ""
}

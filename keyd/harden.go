package keyd

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// HardenReport says which protections Harden put in place.
type HardenReport struct {
	// NotDumpable: the process is no longer dumpable (PR_SET_DUMPABLE 0).
	NotDumpable bool
	// NoCoreFile: the core file size limit is 0, soft and hard (RLIMIT_CORE).
	NoCoreFile bool
}

// String lists what Harden did, for the daemon's start-up log.
func (r HardenReport) String() string {
	var done []string
	if r.NotDumpable {
		done = append(done, "not dumpable")
	}
	if r.NoCoreFile {
		done = append(done, "no core file")
	}
	if len(done) == 0 {
		return "no hardening"
	}
	return strings.Join(done, ", ")
}

// Harden protects the daemon's memory, which holds the principal key, from
// other processes and from crash dumps. Call it first thing in main, before
// the key is loaded. It returns an error naming every step that failed;
// the daemon should refuse to start then (fail closed), since property 1 of
// the design requires both protections.
//
//   - prctl(PR_SET_DUMPABLE, 0): stops key theft by another process running
//     as the daemon's user. The kernel then makes /proc/PID/mem, environ,
//     maps and the like owned by root and refuses ptrace attach without
//     CAP_SYS_PTRACE, even for the same uid. It also stops every core dump,
//     including one piped to systemd-coredump, which ignores RLIMIT_CORE.
//   - setrlimit(RLIMIT_CORE, 0 soft and hard): no core file on a crash, so
//     the key is never written to disk in a dump; the hard limit of 0
//     cannot be raised again without privilege.
//
// Both last until the process exits or calls execve, which restores
// dumpability.
func Harden() (HardenReport, error) {
	var r HardenReport
	var errs []error

	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		errs = append(errs, fmt.Errorf("prctl PR_SET_DUMPABLE: %w", err))
	} else if v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || v != 0 {
		errs = append(errs, fmt.Errorf("process still dumpable after PR_SET_DUMPABLE 0 (value %d, %v)", v, err))
	} else {
		r.NotDumpable = true
	}

	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0}); err != nil {
		errs = append(errs, fmt.Errorf("setrlimit RLIMIT_CORE: %w", err))
	} else {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_CORE, &lim); err != nil || lim.Cur != 0 || lim.Max != 0 {
			errs = append(errs, fmt.Errorf("core file limit not 0 after setrlimit (%d/%d, %v)", lim.Cur, lim.Max, err))
		} else {
			r.NoCoreFile = true
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("harden: %w", errors.Join(errs...))
	}
	return r, nil
}

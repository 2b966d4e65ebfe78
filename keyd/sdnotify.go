package keyd

import (
	"context"
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The daemon speaks sd_notify(3) to its service manager when NOTIFY_SOCKET
// names one (Type=notify in parley-keyd.service): READY=1 once it serves,
// RELOADING=1 and READY=1 around a reload, STOPPING=1 when it begins to
// stop, a STATUS= line that systemctl status shows, and WATCHDOG=1 pings
// when the unit sets WatchdogSec=. Without NOTIFY_SOCKET every call is a
// no-op, so the same code runs under systemd, under
// systemd-socket-activate, in tests and in the demo.

// sdNotify sends state to the service manager, if there is one. A failure
// is logged and otherwise ignored: the daemon serves whether or not its
// manager hears about it.
func (d *Daemon) sdNotify(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		d.logf("sd_notify %q: %v", state, err)
	}
}

// watchdog pings the service manager at half the interval it asked for
// (WATCHDOG_USEC), until ctx ends. A ping is sent only after the server's
// own locks could be taken, so a daemon stuck on them stops pinging and
// systemd restarts it (WatchdogSec= in the unit): a wedged daemon holds
// the key but answers nobody, which is worse than a restart.
func (d *Daemon) watchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		d.logf("watchdog: %v", err)
		return
	}
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.responsive() {
			continue
		}
		d.sdNotify(daemon.SdNotifyWatchdog)
	}
}

// responsive takes and releases the locks every request needs. It blocks
// while one of them is held by a stuck goroutine, which is the point: the
// watchdog goes quiet.
func (d *Daemon) responsive() bool {
	d.Server.mu.Lock()
	closing := d.Server.closing
	d.Server.mu.Unlock()
	// Taking the lock is the check: it blocks while a stuck goroutine
	// holds it.
	d.queue.mu.Lock()
	//lint:ignore SA2001 the critical section is empty on purpose
	d.queue.mu.Unlock()
	return !closing
}

// statusLine is the STATUS= text systemctl status shows for the daemon.
func (d *Daemon) statusLine(socket string) string {
	s := fmt.Sprintf("STATUS=serving on %s; principal %s", socket, d.principal)
	if st, ok := d.Server.LockState(); ok {
		s = fmt.Sprintf("STATUS=LOCKED by %s since %s: every request is refused until an approver runs parley-grant unlock", st.By, st.At.UTC().Format(time.RFC3339))
	}
	return s
}

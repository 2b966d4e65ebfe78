package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
)

// watchdogDumpName is the file in the state folder that holds every
// goroutine's stack when the daemon was stopped by SIGABRT.
const watchdogDumpName = "watchdog.dump"

// onAbort takes SIGABRT from the Go runtime. systemd's watchdog sends it to
// a daemon that stopped pinging (WatchdogSec=); left to the runtime, it
// prints every goroutine's stack to stderr, some 250 lines in the journal
// for each wedged start, whatever GOTRACEBACK says (a caught signal is a
// runtime throw, traced in full). Here the stacks go to STATE/watchdog.dump
// (0600, replaced each time, for whoever debugs the wedge) and the journal
// gets one line. Nothing on this path takes a lock the wedged daemon might
// hold: not the logger's, only a file and a write to stderr.
func onAbort(state string, journald bool) {
	prefix := ""
	if journald {
		prefix = "<2>" // crit, for journald, which reads the prefix on stderr
	}
	abrt := make(chan os.Signal, 1)
	signal.Notify(abrt, syscall.SIGABRT)
	go func() {
		<-abrt
		path := filepath.Join(state, watchdogDumpName)
		where := "in " + path
		if err := os.WriteFile(path, allStacks(), 0o600); err != nil {
			where = "nowhere: " + err.Error()
		}
		fmt.Fprintf(os.Stderr, "%sSIGABRT (systemd's watchdog: the daemon stopped answering its own checks): stopping at once; every goroutine's stack is %s\n", prefix, where)
		os.Exit(exitFail)
	}()
}

// allStacks returns every goroutine's stack, at most 4 MiB of it.
func allStacks() []byte {
	buf := make([]byte, 256<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 4<<20 {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

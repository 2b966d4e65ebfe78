// Package buildinfo says which build a parley-keyd binary is, for --version:
// the release, and what the go tool stamped into the binary: the main
// module's version, the VCS revision it was built from and whether the tree
// had uncommitted changes, and the Go version. A binary built without VCS
// information (go test, -buildvcs=false, a tree without its .git) says
// "unknown" rather than guessing.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what a binary knows about its own build.
type Info struct {
	Module   string // the main module's path
	Version  string // its version: a tag, a pseudo-version, or (devel)
	Revision string // the VCS revision, or "" when not stamped
	Time     string // the revision's commit time, RFC 3339, or ""
	Modified bool   // the tree had uncommitted changes
	Go       string // the Go version that built it
}

// Read returns the running binary's build information.
func Read() Info {
	in := Info{Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	in.Module, in.Version, in.Go = bi.Main.Path, bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Text is the --version output of the binary name at release:
//
//	parley-grant 0.1.0
//	module   github.com/parley-keyd/parley-keyd v0.0.0-20260130202101-efb8e7e1c2d3+dirty
//	revision efb8e7e1c2d3… (2026-01-30T20:21:01Z, modified)
//	go       go1.26.8 linux/amd64
func Text(name, release string) string {
	in := Read()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, release)
	module := in.Module
	if module == "" {
		module = "unknown"
	}
	if in.Version != "" {
		module += " " + in.Version
	}
	fmt.Fprintf(&b, "module   %s\n", module)
	rev := "unknown (built without VCS information)"
	if in.Revision != "" {
		rev = in.Revision
		var notes []string
		if in.Time != "" {
			notes = append(notes, in.Time)
		}
		if in.Modified {
			notes = append(notes, "modified")
		}
		if len(notes) > 0 {
			rev += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	fmt.Fprintf(&b, "revision %s\n", rev)
	fmt.Fprintf(&b, "go       %s %s/%s\n", in.Go, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

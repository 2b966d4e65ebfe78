// Package dist holds what a real install puts in place: the systemd units,
// the sysusers.d and tmpfiles.d files, and the Debian package's files under
// debian/. It has no code; its test installs the package and make install's
// tree on a Debian bookworm booted with systemd as PID 1 in a container
// (systemd-nspawn), and checks them there as an admin and agents would.
package dist

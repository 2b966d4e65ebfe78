package main

import "github.com/parley-keyd/parley-keyd/keyd"

// startPhone starts the phone page when the configuration enables it.
// Placeholder: the phone page's own change replaces this file.
func startPhone(srv *keyd.Server, cfg *keyd.Config, state string, logf func(string, ...any)) (stop func(), err error) {
	return func() {}, nil
}

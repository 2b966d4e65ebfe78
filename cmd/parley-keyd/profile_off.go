//go:build !profile

package main

// startProfile does nothing: this binary was built without the build tag
// "profile" (see profile.go).
func startProfile() (stop func(), err error) { return func() {}, nil }

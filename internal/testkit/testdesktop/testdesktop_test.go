package testdesktop

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestChooseThroughDunst checks the harness itself: a notification sent over
// the private bus is shown by dunst, its action is chosen through dunst's
// context menu, and dunst reports it with ActionInvoked.
func TestChooseThroughDunst(t *testing.T) {
	s := Start(t)
	conn, err := dbus.Connect(s.Bus)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sigs := make(chan *dbus.Signal, 8)
	conn.Signal(sigs)
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.Notifications"),
		dbus.WithMatchMember("ActionInvoked")); err != nil {
		t.Fatal(err)
	}
	obj := conn.Object("org.freedesktop.Notifications", "/org/freedesktop/Notifications")
	var id uint32
	err = obj.Call("org.freedesktop.Notifications.Notify", 0, "harness", uint32(0), "", "Harness check",
		"body text", []string{"k1", "First", "k2", "Second"}, map[string]dbus.Variant{}, int32(0)).Store(&id)
	if err != nil {
		t.Fatal(err)
	}
	s.WaitDisplayed(t, 1)

	menu := s.Choose(t, "k2")
	if !slices.ContainsFunc(menu, func(l string) bool { return strings.HasPrefix(l, "#Second (Harness check) [") }) {
		t.Errorf("menu = %q, want an entry for the action Second", menu)
	}
	deadline := time.After(Wait)
	for invoked := false; !invoked; {
		select {
		case sig := <-sigs:
			if sig.Name != "org.freedesktop.Notifications.ActionInvoked" {
				continue // NameAcquired and the like
			}
			invoked = true
			if sig.Body[0] != id || sig.Body[1] != "k2" {
				t.Errorf("ActionInvoked%v, want (%d, k2)", sig.Body, id)
			}
		case <-deadline:
			t.Fatal("no ActionInvoked")
		}
	}

	if err := obj.Call("org.freedesktop.Notifications.CloseNotification", 0, id).Err; err != nil {
		t.Fatal(err)
	}
	s.WaitDisplayed(t, 0)
	h := s.History(t)
	if len(h) != 1 || h[0].Summary != "Harness check" || h[0].Body != "body text" || h[0].AppName != "harness" {
		t.Errorf("history = %+v", h)
	}
}

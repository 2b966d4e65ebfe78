package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// startTestFloorServer runs the floor server in this process, its socket
// and file in a new folder, and waits until it listens.
func startTestFloorServer(t *testing.T, most int) (sock, file string) {
	t.Helper()
	dir := t.TempDir()
	sock, file = filepath.Join(dir, "floor.sock"), filepath.Join(dir, "floor.log")
	go serveFloor(sock, file, 100, 64, most)
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := net.Dial("unix", sock)
		if err == nil {
			nc.Close()
			return sock, file
		}
		if time.Now().After(deadline) {
			t.Fatalf("floor server did not listen: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// floorLoad runs clients×each requests against the floor server and checks
// that each reply is the reply's size.
func floorLoad(t *testing.T, sock string, clients, each int) {
	t.Helper()
	ops, closeAll, err := floorClients(sock, filler("1", 300), clients)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := op(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestFloorServerSyncsEveryRecord: every request answered has its record in
// the file (the reply leaves after the write), the groups count them all,
// and concurrent requests share syncs.
func TestFloorServerSyncsEveryRecord(t *testing.T) {
	sock, file := startTestFloorServer(t, 0)
	const clients, each = 8, 50
	floorLoad(t, sock, clients, each)
	groups, records, err := floorStats(sock)
	if err != nil {
		t.Fatal(err)
	}
	if records != clients*each {
		t.Errorf("floor server counted %d records, want %d", records, clients*each)
	}
	if groups < 1 || groups > records {
		t.Errorf("floor server counted %d groups for %d records", groups, records)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rec := filler("a", 64)
	if n := bytes.Count(b, rec); n != clients*each {
		t.Errorf("file holds %d records, want %d", n, clients*each)
	}
	t.Logf("%d records in %d groups", records, groups)
}

// TestFloorServerGroupCap: with -floorgroup 2 no sync takes more than two
// records, and none is left waiting.
func TestFloorServerGroupCap(t *testing.T) {
	sock, _ := startTestFloorServer(t, 2)
	const clients, each = 8, 30
	floorLoad(t, sock, clients, each)
	groups, records, err := floorStats(sock)
	if err != nil {
		t.Fatal(err)
	}
	if records != clients*each {
		t.Errorf("floor server counted %d records, want %d", records, clients*each)
	}
	if groups*2 < records {
		t.Errorf("%d records in %d groups: a group held more than 2", records, groups)
	}
}

package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// sshAgent is OpenSSH's ssh-agent in the foreground (-D) on a socket of its
// own, holding one Ed25519 key.
type sshAgent struct {
	sock    string
	cmd     *exec.Cmd
	exited  chan error
	stderr  bytes.Buffer
	pub     ssh.PublicKey
	stopped bool
}

func startSSHAgent(bin, dir string) (*sshAgent, error) {
	a := &sshAgent{sock: filepath.Join(dir, "ssh-agent.sock"), exited: make(chan error, 1)}
	a.cmd = exec.Command(bin, "-D", "-a", a.sock)
	a.cmd.Stderr = &a.stderr
	a.cmd.Stdout = &a.stderr
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ssh-agent: %w", err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-a.exited:
			return nil, fmt.Errorf("ssh-agent exited: %v\n%s", err, a.stderr.String())
		default:
		}
		if nc, err := net.Dial("unix", a.sock); err == nil {
			nc.Close()
			break
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, errors.New("ssh-agent did not listen within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	c, err := a.dial()
	if err != nil {
		a.stop()
		return nil, err
	}
	defer c.close()
	if err := c.Add(agent.AddedKey{PrivateKey: priv, Comment: "parley-keyd bench"}); err != nil {
		a.stop()
		return nil, fmt.Errorf("ssh-agent add key: %w", err)
	}
	if a.pub, err = ssh.NewPublicKey(priv.Public()); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

type sshClient struct {
	agent.ExtendedAgent
	nc net.Conn
}

func (c sshClient) close() { c.nc.Close() }

func (a *sshAgent) dial() (sshClient, error) {
	nc, err := net.Dial("unix", a.sock)
	if err != nil {
		return sshClient{}, err
	}
	return sshClient{agent.NewClient(nc), nc}, nil
}

func (a *sshAgent) pid() int { return a.cmd.Process.Pid }

// stop ends ssh-agent; calling it again does nothing.
func (a *sshAgent) stop() {
	if a.stopped {
		return
	}
	a.stopped = true
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
		<-a.exited
	}
}

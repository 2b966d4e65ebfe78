package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/policies"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

//go:embed demo-policy.toml
var demoPolicy string

func newDemoCmd() *cobra.Command {
	var state string
	var yes bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole product once on a local state folder, with approval in this terminal",
		Long: `demo creates (or reuses) a state folder in the working directory, starts the
daemon on a real Unix socket with the default policy plus one demo rule, and
plays an agent: a grant issued by policy, a grant issued after you approve it
here with the match code, a narrower grant for a sub-agent, verification of
both, and the audit log. Without a terminal (or with --yes) it types the
match code for you and says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(state, yes)
		},
	}
	cmd.Flags().StringVar(&state, "state", "demo-state", "state folder for the demo")
	cmd.Flags().BoolVar(&yes, "yes", false, "approve as the human without asking")
	return cmd
}

func step(n int, title, cli string) {
	fmt.Printf("\n== %d. %s\n", n, title)
	if cli != "" {
		fmt.Printf("   (by hand: %s)\n", cli)
	}
}

func runDemo(state string, yes bool) error {
	state, err := filepath.Abs(state)
	if err != nil {
		return err
	}
	pub, err := keystore.Init(state, nil)
	switch {
	case errors.Is(err, keystore.ErrKeyExists), errors.Is(err, fs.ErrExist):
		fmt.Printf("Reusing the demo state folder %s\n", state)
	case err != nil:
		return err
	default:
		fmt.Printf("Created the demo state folder %s with a new principal key %s\n", state, grant.FormatPublicKey(pub))
	}
	sockDir, err := os.MkdirTemp("", "parley-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "agent.sock")
	u, err := user.Current()
	if err != nil {
		return err
	}
	cfg, err := keyd.ParseConfig([]byte(keyd.DefaultConfig(sock, u.Username, u.Username)), filepath.Join(state, "demo-config.toml"))
	if err != nil {
		return err
	}
	pol, err := policies.Parse([]byte(demoPolicy), "demo-policy.toml")
	if err != nil {
		return err
	}
	signer, err := keystore.Load(state, func() ([]byte, error) { return nil, errors.New("the demo key is not encrypted") })
	if err != nil {
		return err
	}
	defer signer.Close()
	d, err := keyd.New(keyd.Options{Config: cfg, Policy: pol, State: state, Signer: signer})
	if err != nil {
		return err
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	runCtx, stopDaemon := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx, ln) }()
	defer func() {
		stopDaemon()
		<-ran
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	agentKey, err := demoKey(filepath.Join(state, "agent.key"))
	if err != nil {
		return err
	}
	agentPub := grant.FormatPublicKey(agentKey.Public().(ed25519.PublicKey))

	step(1, "The agent connects and asks what it may do", "parley-grant status")
	agent, err := client.Dial(sock)
	if err != nil {
		return err
	}
	defer agent.Close()
	m, err := agent.Hello(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("   daemon %s, principal %s\n   you are %s (uid %d): %s (approvals from you are weak: same user)\n",
		m.Version, m.Principal, m.Caller.User, m.Caller.UID, strings.Join(m.Caller.Roles, " and "))

	step(2, "A grant the policy issues at once", "parley-grant issue --svc cal.example --can 'calendar.*' --exp 20m")
	now := time.Now()
	res, err := agent.Grant(ctx, agentKey, []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.*"), grant.Exp(now.Add(20 * time.Minute).Unix())}, nil)
	if err != nil {
		return err
	}
	fmt.Printf("   issued by rule %q: grant %s, expires %s\n   token: %s\n", res.Rule, res.GrantID, time.Unix(res.Expires, 0).UTC().Format(time.RFC3339), shorten(res.Token))

	step(3, "A grant that needs you: the agent waits, showing a match code", "parley-grant issue --can mail.read --exp 10m; then parley-grant approve ID")
	events := make(chan protocol.Event, 1)
	type outcome struct {
		res *protocol.GrantResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := agent.Grant(ctx, agentKey, []grant.Caveat{grant.Can("mail.read"), grant.Exp(time.Now().Add(10 * time.Minute).Unix())}, func(e protocol.Event) { events <- e })
		done <- outcome{r, err}
	}()
	var ev protocol.Event
	select {
	case ev = <-events:
	case o := <-done:
		return fmt.Errorf("the request ended before it waited for you: %v", o.err)
	}
	fmt.Printf("   [agent's terminal] waiting for approval of %s — match code %s\n", ev.Request, ev.Code)
	human, err := client.Dial(sock)
	if err != nil {
		return err
	}
	defer human.Close()
	list, err := human.Pending(ctx)
	if err != nil {
		return err
	}
	for _, v := range list {
		if v.ID == ev.Request {
			fmt.Printf("   [your terminal] %s\n", v.Title)
			for _, line := range strings.Split(strings.TrimRight(v.Text, "\n"), "\n") {
				fmt.Printf("     | %s\n", line)
			}
		}
	}
	code := ev.Code
	if !yes && term.IsTerminal(int(os.Stdin.Fd())) {
		fmt.Print("   Enter the match code shown by the agent to approve (anything else denies): ")
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		code = strings.TrimSpace(line)
	} else {
		fmt.Printf("   (no terminal or --yes: entering the code %s for you)\n", code)
	}
	if err := human.Approve(ctx, ev.Request, code, "terminal"); err != nil {
		fmt.Printf("   %v\n", err)
	}
	o := <-done
	if o.err != nil {
		fmt.Printf("   the request was refused: %v\n", o.err)
		return showAudit(state)
	}
	fmt.Printf("   approved by %s over the %s (%s): grant %s\n", o.res.Approver, o.res.Channel, o.res.Strength, o.res.GrantID)

	step(4, "The agent narrows its grant for a sub-agent (no daemon needed)", "parley-grant attenuate TOKEN --to SUBKEY --verbs ASK")
	tok, err := grant.Decode(o.res.Token)
	if err != nil {
		return err
	}
	subPub, subKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	sub, err := tok.Delegate(agentKey, subPub, []grant.Caveat{grant.Verbs("ASK")}, time.Now().Unix())
	if err != nil {
		return err
	}
	_ = subKey
	fmt.Printf("   sub-agent grant: %d blocks, holder %s\n", len(sub.Blocks), shorten(sub.Holder()))

	step(5, "A service verifies the grants", "parley-grant verify TOKEN --service mail.example --verb ASK --capability mail.read --trust PRINCIPAL")
	subHolder := sub.Holder()
	for _, c := range []struct {
		who, token, key, verb string
	}{
		{"agent", o.res.Token, agentPub, "ASK"},
		{"sub-agent", sub.Encode(), subHolder, "ASK"},
		{"sub-agent", sub.Encode(), subHolder, "COMMIT"},
	} {
		vctx := grant.Context{Service: "mail.example", Verb: c.verb, Capability: "mail.read", Now: time.Now().Unix(), ProofKey: c.key}
		if c.verb == "COMMIT" {
			vctx.Proposal = &grant.Proposal{Hash: "demo", Risk: "low"}
		}
		_, err := grant.Verify([]string{c.token}, []string{d.Principal()}, vctx)
		verdict := "authorized"
		if err != nil {
			verdict = "refused: " + err.Error()
		}
		fmt.Printf("   %-9s %-6s mail.read: %s\n", c.who, c.verb, verdict)
	}
	return showAudit(state)
}

func showAudit(state string) error {
	step(6, "The audit log: every decision, hash-chained", "parley-keyd audit show; parley-keyd audit verify")
	f, err := os.Open(filepath.Join(state, "audit.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := audit.Show(f, os.Stdout); err != nil {
		return err
	}
	f.Seek(0, 0)
	head, err := audit.VerifyChain(f)
	if err != nil {
		return err
	}
	fmt.Printf("   audit log verifies: %d records\n", head.Seq)
	return nil
}

// demoKey loads the demo agent's key, creating it on first use.
func demoKey(path string) (ed25519.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		return grant.ParseKeyFile(b)
	}
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return k, os.WriteFile(path, grant.MarshalKeyFile(k), 0o600)
}

func shorten(s string) string {
	if len(s) > 48 {
		return s[:32] + "…" + s[len(s)-8:]
	}
	return s
}

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/queue/rules"
)

// mailboxView is one emulated mailbox as a rules scenario sees it: its
// messages, its labels (id → name), its history id, and the Gmail calls
// and quota units spent since the scenario began.
type mailboxView struct {
	Messages  []googlefake.Message
	Labels    map[string]string
	HistoryID uint64
	Calls     map[string]int
	Units     int
}

// viewOf reads the mailbox of email from an emulator in this process.
func viewOf(fake *googlefake.Server, email string) mailboxView {
	return mailboxView{
		Messages: fake.Gmail.Messages(email), Labels: fake.Gmail.LabelNames(email), HistoryID: fake.Gmail.HistoryID(email),
		Calls: fake.CallCounts(), Units: fake.Gmail.QuotaUnits(email),
	}
}

// labelled returns the ids of the messages carrying the user label name.
func (v mailboxView) labelled(name string) map[string]bool {
	out := map[string]bool{}
	for id, n := range v.Labels {
		if id == n || !strings.EqualFold(n, name) {
			continue
		}
		for _, m := range v.Messages {
			if slices.Contains(m.LabelIDs, id) {
				out[m.ID] = true
			}
		}
	}
	return out
}

// matches returns the ids of the messages spec matches.
func (v mailboxView) matches(spec rules.Spec) (map[string]bool, error) {
	c, err := rules.Compile(spec)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range v.Messages {
		if c.Match(&rules.Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Body}) {
			out[m.ID] = true
		}
	}
	return out, nil
}

// gmailCalls sums the Gmail API calls.
func (v mailboxView) gmailCalls() int {
	n := 0
	for method, c := range v.Calls {
		if strings.HasPrefix(method, "gmail.") {
			n += c
		}
	}
	return n
}

// benchGoogle is where a rules scenario's Google answers: the emulator's
// URLs, the account's refresh token, and the mailbox as seeded.
type benchGoogle struct {
	url, tokenURL, refresh string
	seeded                 mailboxView
}

// googleChild is the Google emulator of a benchmark in a process of its
// own: in production Google is another machine, so its mailboxes should not
// sit in mailroom's heap (where the garbage collector would mark them on
// every cycle). The child runs with Go's default GC settings, seeds the
// story's mailbox, and answers until its stdin closes; then it writes the
// mailbox as the run left it.
type googleChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	dir    string
	google benchGoogle
}

// childHello is the child's first line on stdout.
type childHello struct {
	URL      string `json:"url"`
	TokenURL string `json:"tokenUrl"`
	Refresh  string `json:"refresh"`
}

// The child's files in its directory: the mailbox as seeded and at the end.
const (
	childSeeded = "seeded.json"
	childFinal  = "final.json"
)

// startGoogleChild starts the emulator process (the mailroom binary exe;
// empty: this one) with threads story threads in the mailbox of email.
func startGoogleChild(ctx context.Context, exe, email string, threads int) (*googleChild, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "mailroom-bench-google-")
	if err != nil {
		return nil, err
	}
	c := &googleChild{dir: dir}
	c.cmd = exec.CommandContext(ctx, exe, "bench", "--google-child", strconv.Itoa(threads), "--google-dir", dir, "--google-email", email)
	c.cmd.Stderr = os.Stderr
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		c.close()
		return nil, err
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		c.close()
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		c.close()
		return nil, fmt.Errorf("bench: start the Google emulator process: %w", err)
	}
	var hello childHello
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &hello)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("bench: the Google emulator process did not start: %w", err)
	}
	seeded, err := readView(filepath.Join(dir, childSeeded))
	if err != nil {
		c.close()
		return nil, err
	}
	c.google = benchGoogle{url: hello.URL, tokenURL: hello.TokenURL, refresh: hello.Refresh, seeded: seeded}
	return c, nil
}

// finish ends the child and returns the mailbox as the run left it.
func (c *googleChild) finish() (mailboxView, error) {
	c.stdin.Close()
	if err := c.cmd.Wait(); err != nil {
		return mailboxView{}, fmt.Errorf("bench: the Google emulator process: %w", err)
	}
	return readView(filepath.Join(c.dir, childFinal))
}

// close kills the child if it still runs and removes its files.
func (c *googleChild) close() {
	if c.cmd != nil && c.cmd.Process != nil && c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
	os.RemoveAll(c.dir)
}

func readView(path string) (mailboxView, error) {
	var v mailboxView
	raw, err := os.ReadFile(path)
	if err != nil {
		return v, fmt.Errorf("bench: the Google emulator process: %w", err)
	}
	return v, json.Unmarshal(raw, &v)
}

func writeView(path string, v mailboxView) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

// runGoogleChild is the child's side (mailroom bench --google-child N): it
// seeds the mailbox, writes it, says where it answers, and serves until
// its stdin closes.
func RunGoogleChild(ctx context.Context, threads int, dir, email string, stdin io.Reader, stdout io.Writer) error {
	if dir == "" || email == "" {
		return errors.New("bench: --google-child needs --google-dir and --google-email")
	}
	// Gmail keeps history at Google; the emulator keeps only the last 1,000
	// records so its heap does not grow with the run.
	fake := googlefake.New(googlefake.Options{HistoryMaxRecords: 1000, GmailUserUnitsPerMinute: -1, GmailProjectUnitsPerMinute: -1})
	if _, err := fake.Start(); err != nil {
		return err
	}
	defer fake.Close()
	refresh := fake.AddAccount(email)
	if err := story.AddThreads(fake, email, threads); err != nil {
		return err
	}
	fake.ResetCounters()
	if err := writeView(filepath.Join(dir, childSeeded), viewOf(fake, email)); err != nil {
		return err
	}
	hello, err := json.Marshal(childHello{URL: fake.URL(), TokenURL: fake.TokenURL(), Refresh: refresh})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", hello); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stdin); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Hour):
		return errors.New("bench: the Google emulator process was left running for an hour")
	}
	return writeView(filepath.Join(dir, childFinal), viewOf(fake, email))
}

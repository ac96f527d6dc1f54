package readme_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// A transcript is a fenced block of README.md whose first line starts with
// "$ ": commands, each followed by what it printed. A block marked
// <!-- transcript: keeps running --> holds one command that runs until
// stopped, as in a terminal of its own.
const keepsRunningMarker = "<!-- transcript: keeps running -->"

// transcript is one such block.
type transcript struct {
	line       int // of the opening fence
	background bool
	steps      []step
}

// step is one command of a transcript and what the README shows it print.
type step struct {
	command string   // as typed after "$ ", with a here-document's lines
	want    []string // the lines under it
}

// TestREADMEWalkthroughFromAFreshClone runs the README's getting-started
// path as a newcomer would: in a fresh clone of this repository (the
// working tree as it is, committed or not), with an empty database at
// DATABASE_URL, every transcript's commands in the README's order, and
// compares what each printed with what the README shows. A command that
// keeps running stays in the background, as in its own terminal, and its
// block is compared once the others ran (in any order of its lines: they
// come from concurrent workers). Output lines that read "export NAME=VALUE"
// are exported for the commands after them, as the reader is told to.
//
// Only what truly varies from run to run is normalised, on both sides
// (normalise): times, durations, ports, provider ids and the deployment's
// namespace; and runs of spaces, which align columns around them. The
// doubles and the admin server listen on free ports
// (OUTBOXD_STRIPE_ADDR, OUTBOXD_SENDGRID_ADDR, OUTBOXD_ADMIN_ADDR), so the
// test can run beside another. Whoever changes what a command prints
// updates its block: the failure shows what it printed.
func TestREADMEWalkthroughFromAFreshClone(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"git", "make", "bash", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "the walkthrough needs %s: %v", tool, err)
		}
	}
	w := &walkthrough{t: t, dir: freshClone(t)}
	readme, err := os.ReadFile(filepath.Join(w.dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	transcripts, err := parseTranscripts(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(transcripts) == 0 {
		t.Fatal("README.md has no transcript (a block whose first line starts with \"$ \")")
	}
	_, dbURL := pgtest.NewEmptyDB(t)
	w.env = append(cleanEnviron(), "DATABASE_URL="+dbURL, "PWD="+w.dir,
		"OUTBOXD_STRIPE_ADDR=127.0.0.1:0", "OUTBOXD_SENDGRID_ADDR=127.0.0.1:0", "OUTBOXD_ADMIN_ADDR=127.0.0.1:0")
	defer w.stopAll()
	for _, tr := range transcripts {
		if tr.background {
			w.start(tr)
			continue
		}
		for _, s := range tr.steps {
			w.run(tr.line, s)
		}
	}
	w.compareBackground()
}

// parseTranscripts finds README.md's transcripts.
func parseTranscripts(readme string) ([]transcript, error) {
	lines := strings.Split(readme, "\n")
	var out []transcript
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "$ ") {
			continue
		}
		tr := transcript{line: i + 1}
		for j := i - 1; j >= 0; j-- {
			if s := strings.TrimSpace(lines[j]); s != "" {
				tr.background = s == keepsRunningMarker
				break
			}
		}
		i++
		for ; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			if cmd, ok := strings.CutPrefix(l, "$ "); ok {
				// A here-document's lines belong to the command.
				if m := regexp.MustCompile(`<<-?'?(\w+)'?`).FindStringSubmatch(cmd); m != nil {
					for i++; i < len(lines) && lines[i] != m[1]; i++ {
						cmd += "\n" + lines[i]
					}
					cmd += "\n" + m[1]
				}
				tr.steps = append(tr.steps, step{command: cmd})
				continue
			}
			last := &tr.steps[len(tr.steps)-1]
			last.want = append(last.want, l)
		}
		if tr.background && len(tr.steps) != 1 {
			return nil, fmt.Errorf("README.md:%d: a transcript that keeps running holds one command, not %d", tr.line, len(tr.steps))
		}
		out = append(out, tr)
	}
	return out, nil
}

// freshClone clones this repository into a temporary directory and checks
// out its working tree as it is: a commit of every file git would track,
// made with a temporary index, so neither the branch nor the index moves.
func freshClone(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	git := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			skipOrFail(t, "git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tmp := t.TempDir()
	index := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	git(repo, index, "read-tree", "HEAD")
	git(repo, index, "add", "--all")
	tree := git(repo, index, "write-tree")
	commit := git(repo, nil, "-c", "user.name=walkthrough", "-c", "user.email=walkthrough@localhost", "commit-tree", tree, "-p", "HEAD", "-m", "the working tree, for the README's walkthrough")
	clone := filepath.Join(tmp, "outbox")
	git(tmp, nil, "clone", "--quiet", "--shared", "--no-checkout", repo, clone)
	git(clone, nil, "checkout", "--quiet", commit)
	return clone
}

// walkthrough is the state of a reader going through the transcripts: the
// clone, the environment their shell has, and what runs in the background.
type walkthrough struct {
	t          *testing.T
	dir        string
	env        []string
	background []*daemon
}

// daemon is a command left running, its transcript, and its end.
type daemon struct {
	tr     transcript
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan error // receives Wait's answer once
}

// run runs one command to its end and compares what it printed. A command
// whose output does not match yet is run again, for up to 30 s, as a
// reader looks again at a list whose intents are still being performed.
func (w *walkthrough) run(line int, s step) {
	w.t.Helper()
	if name, value, ok := exportLine(s.command); ok {
		w.setenv(name, value)
		return
	}
	var first string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // make build, on a cold cache
		cmd := w.command(ctx, s.command)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		err := cmd.Run()
		cancel()
		if err != nil {
			w.t.Fatalf("README.md:%d: $ %s\nfailed: %v\n%s", line, s.command, err, out)
		}
		w.exportFrom(out.String())
		if first == "" {
			first = out.String()
		}
		if slices.Equal(normalise(out.String()), normalise(strings.Join(s.want, "\n"))) {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("README.md:%d: $ %s\nprinted what the README does not show; update the block.\n%s\nIt printed (first):\n%s", line, s.command, diff(normalise(strings.Join(s.want, "\n")), normalise(first)), first)
		}
		time.Sleep(time.Second)
	}
}

// start starts a command that keeps running, and waits until it has said
// what it has to say for now: some output, then a second of quiet.
func (w *walkthrough) start(tr transcript) {
	w.t.Helper()
	d := &daemon{tr: tr, cmd: w.command(context.Background(), tr.steps[0].command), out: &syncBuffer{}, exited: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		w.t.Fatalf("README.md:%d: $ %s: %v", tr.line, tr.steps[0].command, err)
	}
	w.background = append(w.background, d)
	go func() { d.exited <- d.cmd.Wait() }()
	last, quietSince := "", time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if d.cmd.ProcessState != nil || len(d.exited) > 0 {
			w.t.Fatalf("README.md:%d: $ %s\nexited instead of running on:\n%s", tr.line, tr.steps[0].command, d.out)
		}
		if now := d.out.String(); now != last {
			last, quietSince = now, time.Now()
		} else if now != "" && time.Since(quietSince) > time.Second {
			w.exportFrom(now)
			return
		}
	}
	w.t.Fatalf("README.md:%d: $ %s\nprinted nothing within a minute", tr.line, tr.steps[0].command)
}

// compareBackground compares what each command left running printed, once
// it printed as many lines as its block shows (or after 30 s).
func (w *walkthrough) compareBackground() {
	w.t.Helper()
	for _, d := range w.background {
		want := normalise(strings.Join(d.tr.steps[0].want, "\n"))
		deadline := time.Now().Add(30 * time.Second)
		for len(normalise(d.out.String())) < len(want) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // a line more than the README shows, if one comes
		got := normalise(d.out.String())
		if !slices.Equal(sorted(got), sorted(want)) {
			w.t.Errorf("README.md:%d: $ %s\nprinted what the README does not show (in any order of its lines); update the block.\n%s\nIt printed:\n%s",
				d.tr.line, d.tr.steps[0].command, diff(want, got), d.out)
		}
	}
}

// stopAll stops the commands left running with Ctrl-C's signal, as the
// reader would, and checks that each stops gracefully.
func (w *walkthrough) stopAll() {
	for _, d := range w.background {
		_ = d.cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-d.exited:
			if err != nil {
				w.t.Errorf("README.md:%d: $ %s ended with %v after Ctrl-C, want exit 0:\n%s", d.tr.line, d.tr.steps[0].command, err, d.out)
			}
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
			w.t.Errorf("README.md:%d: $ %s still running 30 s after Ctrl-C", d.tr.line, d.tr.steps[0].command)
		}
	}
}

// command is the shell running text in the clone, with the walkthrough's
// environment, niced as the program's build is (niced): make build
// compiles the whole module.
func (w *walkthrough) command(ctx context.Context, text string) *exec.Cmd {
	shell := niced("bash", "-c", text)
	cmd := exec.CommandContext(ctx, shell.Path, shell.Args[1:]...)
	cmd.Dir, cmd.Env = w.dir, append(slices.Clone(w.env), "GOFLAGS=-p=1")
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// exportFrom exports the "export NAME=VALUE" lines a command printed.
func (w *walkthrough) exportFrom(out string) {
	for _, l := range strings.Split(out, "\n") {
		if name, value, ok := exportLine(strings.TrimSpace(l)); ok {
			w.setenv(name, value)
		}
	}
}

func (w *walkthrough) setenv(name, value string) {
	value = os.Expand(strings.Trim(value, `"'`), func(v string) string { return w.getenv(v) })
	w.env = append(slices.DeleteFunc(w.env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }), name+"="+value)
}

func (w *walkthrough) getenv(name string) string {
	for _, kv := range w.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

var exportPattern = regexp.MustCompile(`^export ([A-Za-z_][A-Za-z0-9_]*)=(\S+)$`)

func exportLine(l string) (name, value string, ok bool) {
	m := exportPattern.FindStringSubmatch(l)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// varying are what differs from run to run, and what each becomes.
var varying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?Z?`), "<time>"},
	{regexp.MustCompile(`\b(127\.0\.0\.1|localhost):\d+`), "$1:<port>"},
	{regexp.MustCompile(`\b(pi|re|ch|pm|seti|txn)_[A-Za-z0-9]{14,}`), "${1}_<id>"},
	{regexp.MustCompile(`\b[0-9a-f]{16}\b`), "<namespace>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`), "<duration>"},
	{regexp.MustCompile(` {2,}`), "  "},
}

var percentEscape = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)

// normalise is text's lines with what varies from run to run replaced.
// Percent-escapes are decoded first, so that an id in a URL reads as it
// does elsewhere.
func normalise(text string) []string {
	text = percentEscape.ReplaceAllStringFunc(text, func(e string) string {
		b, _ := strconv.ParseUint(e[1:], 16, 8)
		return string(rune(b))
	})
	for _, v := range varying {
		text = v.re.ReplaceAllString(text, v.with)
	}
	lines := strings.Split(strings.TrimRight(text, "\n "), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

func sorted(lines []string) []string {
	out := slices.Clone(lines)
	slices.Sort(out)
	return out
}

// diff lists the lines the README shows that were not printed, and the
// lines printed that it does not show, normalised.
func diff(want, got []string) string {
	var b strings.Builder
	count := map[string]int{}
	for _, l := range got {
		count[l]++
	}
	for _, l := range want {
		if count[l] > 0 {
			count[l]--
			continue
		}
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, l := range got {
		if count[l] > 0 {
			count[l]--
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "(the same lines, in another order)"
	}
	return "the README's lines (-) against the command's (+), normalised:\n" + b.String()
}

// skipOrFail skips the test where a tool it needs is missing, except in
// CI, where everything it needs must be there.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// syncBuffer is a buffer a command's output and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

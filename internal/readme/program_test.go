package readme_test

import (
	"bytes"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// TestREADMEGoBlocksRunTogether builds the README's Go blocks, in their
// order, as the body of one main function (as a reader who copies them
// one after another into a program gets), and runs it against an empty
// database and the Stripe and SendGrid doubles, with the environment
// `outboxd doubles` tells a reader to export. It passes when the program
// exits 0 having recorded intents that all succeeded, each with its one
// effect at a double. Each block compiling alone (its example) is not
// enough: a block that needs what no block before it made, or makes what
// a later block cannot use, fails here. A Go block that is not part of
// the program belongs in docs/, as a copy of an example there.
func TestREADMEGoBlocksRunTogether(t *testing.T) {
	t.Parallel()
	blocks := goBlocks(t, filepath.Join(root, "README.md"))
	if len(blocks) == 0 {
		t.Fatal("the README has no Go block")
	}
	src, err := programSource(blocks)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mainFile, bin := filepath.Join(dir, "main.go"), filepath.Join(dir, "program")
	if err := os.WriteFile(mainFile, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	build := niced("go", "build", "-o", bin, mainFile)
	build.Dir = root // in this module, with its go.mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go blocks, in order, do not build as one program: %v\n%s\n--- the program:\n%s", err, out, numbered(src))
	}

	pool, dbURL := pgtest.NewEmptyDB(t)
	stripe, err := stripedouble.NewServer(stripedouble.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stripe.Close()
	sendgrid, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sendgrid.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = append(cleanEnviron(),
		"DATABASE_URL="+dbURL,
		"STRIPE_API_BASE="+stripe.URL(), "STRIPE_API_KEY="+stripedouble.DefaultAPIKey,
		"SENDGRID_API_BASE="+sendgrid.URL(), "SENDGRID_API_KEY="+sendgriddouble.DefaultAPIKey)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's program failed: %v\n%s\n--- the program:\n%s", err, out, numbered(src))
	}

	var recorded, succeeded int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM outbox_intents`).Scan(&recorded, &succeeded); err != nil {
		t.Fatal(err)
	}
	effects := len(stripe.PaymentIntents()) + len(stripe.Refunds()) + len(sendgrid.Emails())
	if recorded == 0 || succeeded != recorded || effects != succeeded {
		t.Errorf("the README's program recorded %d intents, %d succeeded, %d effects at the doubles; want every intent succeeded with its one effect\n%s", recorded, succeeded, effects, out)
	}
}

// programSource is a main package whose main runs blocks in order, each
// importing what its code names of the imports of the example it is
// copied from.
func programSource(blocks []goBlock) (string, error) {
	known := map[string]string{} // package name -> import path
	var body strings.Builder
	for _, b := range blocks {
		if b.path == "" {
			return "", fmt.Errorf("README.md:%d: a Go block that names no example", b.line)
		}
		imports, err := exampleImports(filepath.Join(root, b.path))
		if err != nil {
			return "", err
		}
		for name, p := range imports {
			known[name] = p
		}
		fmt.Fprintf(&body, "\t// README.md:%d, %s#%s\n", b.line, b.path, b.region)
		for _, l := range strings.Split(b.code, "\n") {
			if l != "" {
				l = "\t" + l
			}
			body.WriteString(l + "\n")
		}
	}
	var used []string
	for name := range known {
		if regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\.`).MatchString(body.String()) {
			used = append(used, name)
		}
	}
	sort.Strings(used)
	var src strings.Builder
	src.WriteString("// The README's Go blocks, in order, as one program.\npackage main\n\nimport (\n")
	for _, name := range used {
		fmt.Fprintf(&src, "\t%s %q\n", name, known[name])
	}
	src.WriteString(")\n\nfunc main() {\n" + body.String() + "}\n")
	return src.String(), nil
}

// exampleImports returns the imports of the Go file at file, by the name
// its code uses for each.
func exampleImports(file string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, err
		}
		name := path.Base(p)
		if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) { // github.com/jackc/pgx/v5 is pgx
			name = path.Base(path.Dir(p))
		}
		if spec.Name != nil {
			name = spec.Name.Name
		}
		if name != "_" && name != "." {
			out[name] = p
		}
	}
	return out, nil
}

// cleanEnviron is this process's environment without what would point a
// command or a program at anything but what its test gives it.
func cleanEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "OUTBOXD_"), strings.HasPrefix(name, "STRIPE_"), strings.HasPrefix(name, "SENDGRID_"),
			strings.HasPrefix(name, "WEBHOOK_"), strings.HasPrefix(name, "OTEL_"),
			name == "DATABASE_URL", name == "AMQP_URL", name == "NATS_URL", name == "PWD",
			// make test's own make would make the walkthrough's a sub-make,
			// which says which directory it enters.
			name == "MAKEFLAGS", name == "MFLAGS", name == "MAKELEVEL", name == "MAKEOVERRIDES", name == "GNUMAKEFLAGS":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// numbered is src with line numbers, as the compiler's errors name them.
func numbered(src string) string {
	var b bytes.Buffer
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

// niced is exec.Command for a command that only has to finish, not to be
// fast: it runs at a low CPU priority (and go builds with one job), so
// that a compile started by these tests never starves the suite's
// timing-sensitive tests running beside them (the benchmarks' climbs).
func niced(name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if nice, err := exec.LookPath("nice"); err == nil {
		cmd = exec.Command(nice, append([]string{"-n", "15", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.Env = append(os.Environ(), "GOFLAGS=-p=1")
	return cmd
}

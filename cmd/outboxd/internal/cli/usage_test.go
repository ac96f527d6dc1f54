package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
)

func TestHelpCommandPrintsACommandsHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"Usage:", "Commands:", "version"}},
		{[]string{"help", "record"}, []string{"Usage: outboxd record", "--file string", "--json"}},
		{[]string{"help", "intents"}, []string{"Usage: outboxd intents <subcommand>", "Subcommands:"}},
		{[]string{"help", "intents", "list"}, []string{"Usage: outboxd intents list", "--state value", "--cursor string"}},
		{[]string{"intents", "help", "retry"}, []string{"Usage: outboxd intents retry", "--reason string"}},
		{[]string{"help", "version"}, []string{"Usage: outboxd version"}},
		{[]string{"help", "run"}, []string{"Usage: outboxd run", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}},
	} {
		r := outboxd(t, invocation{args: tc.args})
		if r.code != 0 {
			t.Errorf("outboxd %v: %s; want exit 0", tc.args, r)
		}
		wantContains(t, strings.Join(tc.args, " ")+" stdout", r.stdout, tc.want...)
		if regexp.MustCompile(`\n  -[a-z]`).MatchString(r.stdout) {
			t.Errorf("outboxd %v lists a flag in -flag style:\n%s", tc.args, r.stdout)
		}
	}
}

func TestTyposGetOneLineAndASuggestion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"stauts"}, []string{`unknown command "stauts" (did you mean "stats"?)`, "outboxd help"}},
		{[]string{"migarte"}, []string{`(did you mean "migrate"?)`}},
		{[]string{"list", "--state", "in_doubt"}, []string{`unknown command "list" (did you mean 'outboxd intents list'?)`}},
		{[]string{"resend", "5"}, []string{`(did you mean 'outboxd intents resend'?)`}},
		{[]string{"help", "recrod"}, []string{`unknown command "recrod" (did you mean "record"?)`}},
		{[]string{"intents", "lsit"}, []string{`unknown subcommand "lsit" (did you mean "list"?)`}},
		{[]string{"intents", "resnd"}, []string{`(did you mean "resend"?)`}},
		{[]string{"stats", "--jsn"}, []string{"unknown flag --jsn (did you mean --json?)", "see 'outboxd stats --help'"}},
		{[]string{"migrate", "--databse-url", "x"}, []string{"unknown flag --databse-url (did you mean --database-url?)"}},
		{[]string{"intents", "list", "--stat", "in_doubt"}, []string{"unknown flag --stat (did you mean --state?)", "see 'outboxd intents list --help'"}},
		{[]string{"intents", "show", "1", "--jsno"}, []string{"unknown flag --jsno (did you mean --json?)"}},
		{[]string{"run", "--workers", "many"}, []string{`invalid value "many" for flag --workers`}},
		{[]string{"record", "--file"}, []string{"flag --file needs a value"}},
		{[]string{"stats", "--zzzzzz"}, []string{"unknown flag --zzzzzz; see"}},
		{[]string{"--database-url", "x", "stats"}, []string{"flags go after it"}},
	} {
		r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": unreachableDB}, args: tc.args})
		if r.code != 2 {
			t.Errorf("outboxd %v: %s; want exit 2", tc.args, r)
		}
		if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
			t.Errorf("outboxd %v: %d lines on stderr, want one:\n%s", tc.args, n+1, r.stderr)
		}
		wantContains(t, strings.Join(tc.args, " ")+" stderr", r.stderr, tc.want...)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := outboxd(t, invocation{args: args})
		if r.code != 0 || r.stdout != "outboxd "+cli.Version()+"\n" {
			t.Errorf("outboxd %v: %s; want exit 0 and outboxd %s", args, r, cli.Version())
		}
	}
	if cli.Version() == "" {
		t.Error("Version is empty; want the build's version or dev")
	}
}

// TestCommandListIsAligned: every summary in 'outboxd --help' and
// 'outboxd intents --help' starts in one column, whatever the longest
// command's name ('healthcheck' used to push its own out of line).
func TestCommandListIsAligned(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"intents", "--help"}} {
		r := outboxd(t, invocation{args: args})
		_, list, ok := strings.Cut(r.stdout, "Commands:\n")
		if !ok {
			_, list, ok = strings.Cut(r.stdout, "Subcommands:\n")
		}
		list, _, _ = strings.Cut(list, "\n\n")
		if !ok || list == "" {
			t.Fatalf("outboxd %v prints no command list:\n%s", args, r.stdout)
		}
		column := -1
		for _, l := range strings.Split(list, "\n") {
			name := strings.Fields(l)[0]
			afterName := strings.Index(l, name) + len(name)
			at := len(l) - len(strings.TrimLeft(l[afterName:], " "))
			if column < 0 {
				column = at
			}
			if at != column || at < afterName+2 {
				t.Errorf("outboxd %v: the summary of %q starts in column %d, the first in %d (two spaces at least after the name):\n%s", args, name, at, column, list)
			}
		}
	}
}

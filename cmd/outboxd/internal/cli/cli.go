// Package cli implements the outboxd command. main only calls Main, so every
// command can be run and tested in-process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/outboxkit/outbox/internal/termtext"
)

// Env is what a command may touch of its process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// OSEnv is the real process environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env Env) error
}

func commands() []command {
	return []command{
		{"migrate", "create or upgrade the database schema (River's and the outbox's)", runMigrate},
		{"run", "run the dispatcher daemon that performs recorded intents", runDispatcher},
		{"record", "record messages and their intents from a stream of JSON values (file or stdin)", runRecord},
		{"demo", "run the whole pipeline end to end against local provider doubles", runDemo},
		{"intents", "list and show intents; retry, cancel or resolve one (operator actions, audited)", runIntents},
		{"stats", "count intents by state and kind; in_doubt count and oldest pending age", runStats},
		{"doubles", "serve the Stripe and SendGrid doubles for local development", runDoubles},
		{"bench", "measure throughput, latency and memory against baselines from the same run", runBench},
		{"chaos", "prove exactly-once under fire: killed dispatchers, killed connections, faulty providers", runChaos},
		{"healthcheck", "exit 0 if the admin server of 'outboxd run' answers /healthz (for container health checks)", runHealthcheck},
	}
}

const overview = `outboxd: a transactional outbox that performs external side effects
(payments, emails) at most once each, from messages delivered at least once.

Usage:
  outboxd <command> [flags]

Commands:
%s
Run 'outboxd help <command>' (or 'outboxd <command> --help') for a command's flags.

Quick start:
  outboxd demo                 # everything end to end, in a scratch database
  outboxd migrate              # then, on your database:
  STRIPE_API_KEY=... SENDGRID_API_KEY=... outboxd run

The database is taken from --database-url or DATABASE_URL.
`

func usage(w io.Writer) {
	lines := [][2]string{}
	for _, c := range commands() {
		lines = append(lines, [2]string{c.name, c.summary})
	}
	lines = append(lines,
		[2]string{"help", "print this, or a command's help: outboxd help <command>"},
		[2]string{"version", "print outboxd's version"})
	// The summaries start in one column, after the longest name.
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, l[0], l[1])
	}
	fmt.Fprintf(w, overview, b.String())
}

// errUsage marks an error whose message already says what to fix; Main
// prints it without a stack of context.
var errUsage = errors.New("usage error")

// Main runs outboxd with args (without the program name) and returns the
// process exit code: 0 on success, 1 when the command failed, 2 for bad
// usage.
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(env.Stdout)
		return 0
	case "help":
		return runHelp(ctx, args[1:], env)
	case "version", "-version", "--version":
		fmt.Fprintf(env.Stdout, "outboxd %s\n", Version())
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		return exitCode(c.name, c.run(ctx, args[1:], env), env)
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(env.Stderr, "outboxd: %s before a command: flags go after it, as in 'outboxd <command> %s'; run 'outboxd help' for the commands\n", args[0], args[0])
		return 2
	}
	hint := didYouMean(args[0], commandNames())
	for _, c := range intentsSubcommands() {
		if c.name == args[0] || intentsAliases[args[0]] == c.name {
			hint = fmt.Sprintf(" (did you mean 'outboxd intents %s'?)", args[0])
		}
	}
	fmt.Fprintf(env.Stderr, "outboxd: unknown command %q%s; run 'outboxd help' for the commands\n", args[0], hint)
	return 2
}

// exitCode prints a command's error and returns its exit code.
func exitCode(name string, err error, env Env) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		// The sentinel's text says nothing the message does not.
		fmt.Fprintf(env.Stderr, "outboxd %s: %s\n", name, termtext.Clean(strings.TrimPrefix(cliMessage(err), errUsage.Error()+": "), true))
		return 2
	default:
		fmt.Fprintf(env.Stderr, "outboxd %s: %v\n", name, termtext.Clean(cliMessage(err), true))
		return 1
	}
}

// runHelp is 'outboxd help [command [subcommand]]': the overview, or the
// command's own --help.
func runHelp(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		usage(env.Stdout)
		return 0
	}
	switch args[0] {
	case "help":
		usage(env.Stdout)
		return 0
	case "version":
		fmt.Fprintln(env.Stdout, "Usage: outboxd version\n\nPrints outboxd's version (also: outboxd --version).")
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return exitCode(c.name, c.run(ctx, append(append([]string{}, args[1:]...), "--help"), env), env)
		}
	}
	fmt.Fprintf(env.Stderr, "outboxd help: unknown command %q%s; run 'outboxd help' for the commands\n", args[0], didYouMean(args[0], commandNames()))
	return 2
}

func commandNames() []string {
	names := []string{"help", "version"}
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// newFlagSet returns a flag set whose help names the command, explains it
// and lists its flags in --flag style, and whose errors are returned
// rather than printed with the whole help (see parseFlags).
func newFlagSet(name, synopsis, description string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: outboxd %s\n\n%s\n\nFlags (each can also be set as OUTBOXD_<FLAG>, e.g. --log-format as OUTBOXD_LOG_FORMAT; the command line wins):\n", synopsis, strings.TrimSpace(description))
		printFlags(fs.Output(), fs)
	}
	return fs
}

// EnvName is the environment variable that sets a flag: OUTBOXD_ and the
// flag's name in upper case with '-' as '_' (--max-attempts is
// OUTBOXD_MAX_ATTEMPTS). A flag on the command line wins over it.
func EnvName(flag string) string {
	return "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag whose OUTBOXD_ variable is set, before the
// command line is parsed.
func applyEnv(fs *flag.FlagSet, env Env) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if v := env.Getenv(name); v != "" && err == nil {
			if setErr := fs.Set(f.Name, v); setErr != nil {
				err = usageErrorf("%s (for --%s): %v", name, f.Name, setErr)
			}
			if s, ok := f.Value.(interface{ setSource(string) }); ok {
				s.setSource(name)
			}
		}
	})
	return err
}

// parse applies the environment, parses flags and refuses positional
// arguments.
func parse(fs *flag.FlagSet, args []string, env Env) error {
	if err := applyEnv(fs, env); err != nil {
		return err
	}
	if err := parseFlags(fs, args, env); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q: this command takes only flags (see 'outboxd %s --help')", errUsage, fs.Arg(0), fs.Name())
	}
	return nil
}

// parseWithOperand is parse for a command that takes one operand (a FILE)
// besides its flags, before, after or between them: it returns the operand,
// or "" when none was given.
func parseWithOperand(fs *flag.FlagSet, args []string, env Env, what string) (string, error) {
	if err := applyEnv(fs, env); err != nil {
		return "", err
	}
	if err := parseFlags(fs, args, env); err != nil {
		return "", err
	}
	operand := ""
	for fs.NArg() > 0 {
		if operand != "" {
			return "", fmt.Errorf("%w: unexpected argument %q: this command takes one %s at most (see 'outboxd %s --help')", errUsage, fs.Arg(0), what, fs.Name())
		}
		operand = fs.Arg(0)
		// The flag package stops at the first operand; the flags after it
		// count too ('outboxd record messages.json --json').
		if err := parseFlags(fs, fs.Args()[1:], env); err != nil {
			return "", err
		}
	}
	return operand, nil
}

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", l.format)
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/chaos"
)

func runChaos(ctx context.Context, args []string, env Env) error {
	fs, f := newChaosFlags(env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if f.faultRate < 0 || f.faultRate > 1 {
		return usageErrorf("--fault-rate must be between 0 and 1, got %g", f.faultRate)
	}
	if f.callTimeout <= 0 {
		return usageErrorf("--call-timeout must be positive, got %s", f.callTimeout)
	}
	if f.serveDoubles {
		return f.serve(ctx, env)
	}
	if err := f.validate(); err != nil {
		return err
	}
	logger, err := f.logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable to run the dispatchers: %w", err)
	}

	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	if err := f.dbURL.check(); err != nil {
		return err
	}
	name, scratchURL, drop, err := chaos.ScratchDatabase(ctx, f.dbURL.url, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "scratch database %s\n", name)
	if f.keep {
		defer fmt.Fprintf(env.Stderr, "kept the scratch database %s\n", name)
	} else {
		defer func() {
			if err := drop(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(env.Stderr, "could not drop %s: %v\n", name, err)
			}
		}()
	}
	report, err := chaos.Run(ctx, f.config(bin, scratchURL, logger, env))
	if report != nil {
		if err := f.writeReport(report, env); err != nil {
			return err
		}
	}
	if errors.Is(err, chaos.ErrViolated) {
		return fmt.Errorf("%w (see the report)", chaos.ErrViolated)
	}
	return err
}

// chaosFlags are the flags of outboxd chaos.
type chaosFlags struct {
	dbURL            databaseURL
	duration         time.Duration
	rate             float64
	messages         int
	dispatchers      int
	killEvery        time.Duration
	backendKillEvery time.Duration
	faultRate        float64
	callTimeout      time.Duration
	drainTimeout     time.Duration
	seed             uint64
	keep             bool
	logDir           string
	asJSON           bool
	serveDoubles     bool
	holdFaults       bool
	sendgridTLS      bool
	logs             logFlags
}

// newChaosFlags declares outboxd chaos's flags and its help.
func newChaosFlags(env Env) (*flag.FlagSet, *chaosFlags) {
	f := &chaosFlags{}
	fs := newFlagSet("chaos", "chaos [flags]", `
Runs the multi-process chaos suite in a scratch database of its own on the
server at --database-url (dropped afterwards unless --keep-database):

  - the Stripe and SendGrid doubles run in a process of their own and lose
    responses, answer 500 before and after acting, rate-limit, and hold
    responses longer than the call timeout; Stripe has 503 storms that
    spend the attempt budget, and already holds another deployment's
    PaymentIntents; SendGrid speaks HTTP/2 over TLS and resets some
    streams after accepting the email;
  - --dispatchers 'outboxd run' processes (this executable) work one
    database; a random one is killed with SIGKILL about every --kill-every
    and a new one started; random PostgreSQL backends of the database are
    terminated about every --backend-kill-every;
  - an at-least-once driver delivers messages, with sequential and
    concurrent duplicates, each recording a payment and an email (every
    fifth payment only authorised, then captured, or for every tenth
    cancelled, by an intent ordered after it; every third message also a
    partial refund ordered after the payment, taking its PaymentIntent id);
    some ids contain ':', '%' and '~' or are as long as allowed;
  - an operator cancels, resends and resolves random intents.

After --duration the chaos stops and the dispatchers drain. The report is
judged from the doubles' own records: no effect twice, every succeeded
intent exactly once and with its own object, no intent lost, no intent that
may have acted failed, every in_doubt intent backed by evidence that its
attempt was really ambiguous, every processed marker with its intents. The
report counts the in_doubt intents settled by a later look-up, those sent
again after a consistent read proved absence, those left for an operator,
and the share of Stripe intents left in_doubt. Exits 1 on any violation.

Use a long --duration (e.g. 10m) for a soak.`, env)
	registerDatabaseFlag(fs, env, &f.dbURL)
	fs.DurationVar(&f.duration, "duration", chaos.DefaultDuration, "how long the chaos lasts before the drain")
	fs.Float64Var(&f.rate, "rate", chaos.DefaultRate, "messages delivered per second during --duration")
	fs.IntVar(&f.messages, "messages", 0, "messages to deliver (default: --rate × --duration)")
	fs.IntVar(&f.dispatchers, "dispatchers", chaos.DefaultDispatchers, "'outboxd run' processes at a time")
	fs.DurationVar(&f.killEvery, "kill-every", chaos.DefaultKillEvery, "mean time between two SIGKILLs of a random dispatcher")
	fs.DurationVar(&f.backendKillEvery, "backend-kill-every", chaos.DefaultBackendKillEvery, "mean time between two rounds of PostgreSQL backend terminations")
	fs.Float64Var(&f.faultRate, "fault-rate", chaos.DefaultFaultRate, "share of payments and emails the doubles fail, from 0 to 1")
	fs.DurationVar(&f.callTimeout, "call-timeout", chaos.DefaultCallTimeout, "the dispatchers' --call-timeout; delay faults last one second longer")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", chaos.DefaultDrainTimeout, "longest wait for the drain after the chaos")
	fs.Uint64Var(&f.seed, "seed", 0, "seed for the run's choices (0: from the clock; the report prints it)")
	fs.BoolVar(&f.keep, "keep-database", false, "keep the scratch database for inspection")
	fs.StringVar(&f.logDir, "log-dir", "", "directory to write every process's output to (dispatcher-N.log, doubles.log)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON on stdout (progress still goes to stderr)")
	fs.BoolVar(&f.serveDoubles, "serve-doubles", false, "internal: serve the suite's doubles (uses --seed, --fault-rate, --call-timeout), print their addresses as JSON, and wait for SIGTERM")
	fs.BoolVar(&f.holdFaults, "hold-faults", false, "internal: with --serve-doubles, inject no fault until the suite posts to "+chaos.StartPath)
	fs.BoolVar(&f.sendgridTLS, "sendgrid-tls", false, "internal: with --serve-doubles, serve the SendGrid double over TLS and HTTP/2 (self-signed) and reset some streams after accepting the email")
	f.logs.register(fs)
	f.logs.level = "warn"
	return fs, f
}

// serve is --serve-doubles: the suite's doubles, in this process, until
// SIGINT or SIGTERM; their addresses go to stdout as one JSON line.
func (f *chaosFlags) serve(ctx context.Context, env Env) error {
	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	return chaos.ServeDoubles(ctx, chaos.DoublesConfig{Seed: f.seed, FaultRate: f.faultRate, DelayFor: chaos.DelayFor(f.callTimeout), HoldFaults: f.holdFaults, SendGridTLS: f.sendgridTLS},
		func(a chaos.DoublesAddrs) { _ = json.NewEncoder(env.Stdout).Encode(a) })
}

// validate refuses the suite's flags out of their bounds, and creates
// --log-dir.
func (f *chaosFlags) validate() error {
	for name, d := range map[string]time.Duration{"duration": f.duration, "kill-every": f.killEvery, "backend-kill-every": f.backendKillEvery, "drain-timeout": f.drainTimeout} {
		if d <= 0 {
			return usageErrorf("--%s must be positive, got %s", name, d)
		}
	}
	if f.rate <= 0 {
		return usageErrorf("--rate must be positive, got %g", f.rate)
	}
	if f.messages < 0 || f.messages > 1_000_000 {
		return usageErrorf("--messages must be between 1 and 1000000, got %d", f.messages)
	}
	if f.dispatchers < 1 || f.dispatchers > 16 {
		return usageErrorf("--dispatchers must be between 1 and 16, got %d", f.dispatchers)
	}
	if f.logDir != "" {
		if err := os.MkdirAll(f.logDir, 0o755); err != nil {
			return usageErrorf("--log-dir: %v", err)
		}
	}
	return nil
}

// config is the suite's configuration from the flags, running bin as the
// dispatchers against the database at dbURL.
func (f *chaosFlags) config(bin, dbURL string, logger *slog.Logger, env Env) chaos.Config {
	fr := f.faultRate
	if fr == 0 {
		fr = -1 // Config's zero means the default
	}
	return chaos.Config{
		Binary: bin, DatabaseURL: dbURL, Duration: f.duration, Rate: f.rate, Messages: f.messages,
		Dispatchers: f.dispatchers, KillEvery: f.killEvery, BackendKillEvery: f.backendKillEvery,
		FaultRate: fr, CallTimeout: f.callTimeout, DrainTimeout: f.drainTimeout, Seed: f.seed,
		LogDir: f.logDir, Progress: env.Stderr, Logger: logger,
	}
}

func (f *chaosFlags) writeReport(report *chaos.Report, env Env) error {
	if f.asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return report.WriteTable(env.Stdout)
}

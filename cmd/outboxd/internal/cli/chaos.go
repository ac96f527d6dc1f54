package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/chaos"
)

func runChaos(ctx context.Context, args []string, env Env) error {
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
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	duration := fs.Duration("duration", chaos.DefaultDuration, "how long the chaos lasts before the drain")
	rate := fs.Float64("rate", chaos.DefaultRate, "messages delivered per second during --duration")
	messages := fs.Int("messages", 0, "messages to deliver (default: --rate × --duration)")
	dispatchers := fs.Int("dispatchers", chaos.DefaultDispatchers, "'outboxd run' processes at a time")
	killEvery := fs.Duration("kill-every", chaos.DefaultKillEvery, "mean time between two SIGKILLs of a random dispatcher")
	backendKillEvery := fs.Duration("backend-kill-every", chaos.DefaultBackendKillEvery, "mean time between two rounds of PostgreSQL backend terminations")
	faultRate := fs.Float64("fault-rate", chaos.DefaultFaultRate, "share of payments and emails the doubles fail, from 0 to 1")
	callTimeout := fs.Duration("call-timeout", chaos.DefaultCallTimeout, "the dispatchers' --call-timeout; delay faults last one second longer")
	drainTimeout := fs.Duration("drain-timeout", chaos.DefaultDrainTimeout, "longest wait for the drain after the chaos")
	seed := fs.Uint64("seed", 0, "seed for the run's choices (0: from the clock; the report prints it)")
	keep := fs.Bool("keep-database", false, "keep the scratch database for inspection")
	logDir := fs.String("log-dir", "", "directory to write every process's output to (dispatcher-N.log, doubles.log)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout (progress still goes to stderr)")
	serveDoubles := fs.Bool("serve-doubles", false, "internal: serve the suite's doubles (uses --seed, --fault-rate, --call-timeout), print their addresses as JSON, and wait for SIGTERM")
	holdFaults := fs.Bool("hold-faults", false, "internal: with --serve-doubles, inject no fault until the suite posts to "+chaos.StartPath)
	sendgridTLS := fs.Bool("sendgrid-tls", false, "internal: with --serve-doubles, serve the SendGrid double over TLS and HTTP/2 (self-signed) and reset some streams after accepting the email")
	var logs logFlags
	logs.register(fs)
	logs.level = "warn"
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *faultRate < 0 || *faultRate > 1 {
		return usageErrorf("--fault-rate must be between 0 and 1, got %g", *faultRate)
	}
	if *callTimeout <= 0 {
		return usageErrorf("--call-timeout must be positive, got %s", *callTimeout)
	}
	if *serveDoubles {
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return chaos.ServeDoubles(ctx, chaos.DoublesConfig{Seed: *seed, FaultRate: *faultRate, DelayFor: chaos.DelayFor(*callTimeout), HoldFaults: *holdFaults, SendGridTLS: *sendgridTLS},
			func(a chaos.DoublesAddrs) { _ = json.NewEncoder(env.Stdout).Encode(a) })
	}
	for name, d := range map[string]time.Duration{"duration": *duration, "kill-every": *killEvery, "backend-kill-every": *backendKillEvery, "drain-timeout": *drainTimeout} {
		if d <= 0 {
			return usageErrorf("--%s must be positive, got %s", name, d)
		}
	}
	if *rate <= 0 {
		return usageErrorf("--rate must be positive, got %g", *rate)
	}
	if *messages < 0 || *messages > 1_000_000 {
		return usageErrorf("--messages must be between 1 and 1000000, got %d", *messages)
	}
	if *dispatchers < 1 || *dispatchers > 16 {
		return usageErrorf("--dispatchers must be between 1 and 16, got %d", *dispatchers)
	}
	if *logDir != "" {
		if err := os.MkdirAll(*logDir, 0o755); err != nil {
			return usageErrorf("--log-dir: %v", err)
		}
	}
	logger, err := logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable to run the dispatchers: %w", err)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	name, scratchURL, drop, err := chaos.ScratchDatabase(ctx, dbURL, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stderr, "scratch database %s\n", name)
	if *keep {
		defer fmt.Fprintf(env.Stderr, "kept the scratch database %s\n", name)
	} else {
		defer func() {
			if err := drop(context.WithoutCancel(ctx)); err != nil {
				fmt.Fprintf(env.Stderr, "could not drop %s: %v\n", name, err)
			}
		}()
	}
	fr := *faultRate
	if fr == 0 {
		fr = -1 // Config's zero means the default
	}
	report, err := chaos.Run(ctx, chaos.Config{
		Binary: bin, DatabaseURL: scratchURL, Duration: *duration, Rate: *rate, Messages: *messages,
		Dispatchers: *dispatchers, KillEvery: *killEvery, BackendKillEvery: *backendKillEvery,
		FaultRate: fr, CallTimeout: *callTimeout, DrainTimeout: *drainTimeout, Seed: *seed,
		LogDir: *logDir, Progress: env.Stderr, Logger: logger,
	})
	if report != nil {
		if *asJSON {
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(report); err != nil {
				return err
			}
		} else if err := report.WriteTable(env.Stdout); err != nil {
			return err
		}
	}
	if errors.Is(err, chaos.ErrViolated) {
		return fmt.Errorf("%w (see the report)", chaos.ErrViolated)
	}
	return err
}

// Command notes is an example service: it creates notes over HTTP and
// publishes NoteCreated through the outbox to a real RabbitMQ, where a
// "tagger" consumer tags each note and emails its author exactly once,
// however often the event is delivered. Run it with `go run ./cmd/notes`;
// `go run ./cmd/notes --help` explains what it shows.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the example with args (without the program name) and returns
// the exit code: 0 when all went well, 1 when the scenario found a problem
// or the service failed, 2 for bad usage. It returns when the scenario is
// done (without --serve) or when ctx ends (with it).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, getenv, stderr)
	var usageErr *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "notes: %v\n", err)
		return 2
	case err != nil:
		return 2 // the flag package has printed the problem and the usage
	}
	log := newLogger(o, stderr)
	progress := stdout
	if o.json {
		progress = stderr
	}

	a, err := start(ctx, o, log, progress)
	if err != nil {
		fmt.Fprintf(stderr, "notes: %v\n", err)
		return 1
	}
	code := 0
	if o.scenario {
		rep, err := runScenario(ctx, a, o, progress)
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			printReport(stdout, rep)
		}
		if err != nil {
			if !errors.Is(err, errScenarioFailed) {
				fmt.Fprintf(stderr, "notes: %v\n", err)
			}
			code = 1
		}
	}
	if o.serve && ctx.Err() == nil {
		fmt.Fprintf(progress, "serving %s (POST /notes, GET /notes/{id}); Ctrl-C to stop\n", a.baseURL())
		<-ctx.Done()
		log.Info("stopping: signal received")
	}
	fmt.Fprintf(progress, "shutting down\n")
	if err := a.close(context.WithoutCancel(ctx)); err != nil {
		fmt.Fprintf(stderr, "notes: shutdown: %v\n", err)
		code = 1
	}
	return code
}

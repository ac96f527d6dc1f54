package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Defaults for the flags and the environment.
const (
	defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQPURL   = "amqp://guest:guest@127.0.0.1:5672/"
	defaultAddr      = "127.0.0.1:8090"
	defaultNotes     = 5
	defaultTimeout   = 90 * time.Second
	defaultFrom      = "notes@example.com"
	maxNotes         = 1000
)

// usageError is a command-line or environment problem; its message says
// what to fix.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// options is the parsed command line and environment.
type options struct {
	// serverURL is the PostgreSQL server the scratch database is created
	// on (DATABASE_URL), used when databaseURL is empty.
	serverURL string
	// databaseURL is an existing database to use instead of a scratch one.
	databaseURL  string
	keepDatabase bool
	// amqpURL is the broker (AMQP_URL). It holds a password: never logged
	// unredacted.
	amqpURL string
	addr    string
	serve   bool
	// scenario runs the scenario; always true without serve.
	scenario bool
	notes    int
	timeout  time.Duration
	json     bool
	from     string
	// sendgridBase and sendgridKey point the email provider at the real
	// SendGrid when both are set; otherwise an in-process double is used.
	sendgridBase string
	sendgridKey  string
	logLevel     slog.Level
	logFormat    string
}

const usageText = `notes: an example service that publishes NoteCreated through the outbox
and consumes it exactly once, on a real RabbitMQ and PostgreSQL.

What it shows:
  POST /notes inserts the note and records a rabbitmq.publish intent for
  NoteCreated in ONE transaction (the outbox): no note without its event,
  no event without its note. The dispatcher publishes it, with the intent's
  key "note-created:<id>" as the AMQP message-id. The "tagger" consumer
  (intents/amqpconsumer) derives tags from the note, stores them and records
  a sendgrid.email intent to the author, in one transaction with its
  processed marker; a duplicate delivery finds the marker and does nothing.
  An Idempotency-Key header makes the POST itself safe to retry.

By default it runs a scenario and exits: it creates notes through its own
HTTP API, retries a POST (sequentially and concurrently) with the same
Idempotency-Key, publishes a duplicate NoteCreated straight to RabbitMQ with
the same message-id, and cuts the tagger's connection after a commit but
before the ack, so the broker redelivers. It then reports what reached the
broker and the SendGrid double, and exits 1 if any effect happened twice or
anything is missing.

Usage:
  go run ./cmd/notes                  # the scenario, then exit
  go run ./cmd/notes --serve          # serve the API until SIGINT/SIGTERM
  go run ./cmd/notes --serve --scenario

API (with --serve):
  curl -i -X POST localhost:8090/notes -H 'Idempotency-Key: k1' \
    -d '{"title":"Plan","body":"#launch meeting on Monday","author_email":"ann@example.com"}'
  curl -s localhost:8090/notes/1

Environment:
  DATABASE_URL       PostgreSQL server for the scratch database
                     (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
  AMQP_URL           RabbitMQ (default amqp://guest:guest@127.0.0.1:5672/)
  SENDGRID_API_BASE  with SENDGRID_API_KEY, send emails to this SendGrid
  SENDGRID_API_KEY   instead of the in-process SendGrid double

The scratch database is created on the server and dropped at exit (unless
--keep-database). The RabbitMQ exchange, queues and dead-letter exchange are
named with a random run id and deleted at exit, with any message in them.

Flags:
`

// parseArgs parses args (without the program name) and the environment.
// It returns flag.ErrHelp after printing the help to out for -h/--help.
func parseArgs(args []string, getenv func(string) string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("notes", flag.ContinueOnError)
	fs.SetOutput(out)
	o := options{}
	var logLevel string
	fs.StringVar(&o.databaseURL, "database-url", "", "use this existing database (created tables are kept) instead of a scratch one on DATABASE_URL's server")
	fs.BoolVar(&o.keepDatabase, "keep-database", false, "do not drop the scratch database at exit")
	fs.StringVar(&o.addr, "addr", "", "HTTP listen address (default "+defaultAddr+" with --serve, an ephemeral port otherwise)")
	fs.BoolVar(&o.serve, "serve", false, "keep serving the API until SIGINT/SIGTERM")
	fs.BoolVar(&o.scenario, "scenario", false, "with --serve, run the scenario first (without --serve it always runs)")
	fs.IntVar(&o.notes, "notes", defaultNotes, "notes the scenario creates (3 to 1000)")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "deadline for the scenario")
	fs.BoolVar(&o.json, "json", false, "print the scenario's report as JSON (progress goes to stderr)")
	fs.StringVar(&o.from, "email-from", defaultFrom, "sender of the notification emails (a verified sender, with the real SendGrid)")
	fs.StringVar(&logLevel, "log-level", "", "debug, info, warn or error (default info with --serve, warn otherwise)")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json (logs go to stderr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q", fs.Arg(0))
	}

	if !o.serve {
		o.scenario = true
	}
	if o.notes < 3 || o.notes > maxNotes {
		return o, usagef("--notes must be between 3 and %d, got %d", maxNotes, o.notes)
	}
	if o.timeout <= 0 {
		return o, usagef("--timeout must be positive, got %s", o.timeout)
	}
	if o.keepDatabase && o.databaseURL != "" {
		return o, usagef("--keep-database applies to the scratch database; --database-url is never dropped")
	}
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
		if o.serve {
			o.addr = defaultAddr
		}
	}
	if logLevel == "" {
		logLevel = "warn"
		if o.serve {
			logLevel = "info"
		}
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return o, usagef("--log-level must be debug, info, warn or error, got %q", logLevel)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, usagef("--log-format must be text or json, got %q", o.logFormat)
	}

	o.serverURL = getenvDefault(getenv, "DATABASE_URL", defaultServerURL)
	o.amqpURL = getenvDefault(getenv, "AMQP_URL", defaultAMQPURL)
	o.sendgridBase, o.sendgridKey = getenv("SENDGRID_API_BASE"), getenv("SENDGRID_API_KEY")
	if (o.sendgridBase == "") != (o.sendgridKey == "") {
		return o, usagef("set both SENDGRID_API_BASE and SENDGRID_API_KEY to use a real SendGrid, or neither for the double")
	}
	return o, nil
}

func getenvDefault(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// newLogger builds the service's logger on w.
func newLogger(o options, w io.Writer) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}

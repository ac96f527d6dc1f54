package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// shutdownGrace bounds each step of the shutdown.
const shutdownGrace = 15 * time.Second

// app is the running service: the database, the RabbitMQ topology, the
// providers, the dispatcher, the tagger and the HTTP API.
type app struct {
	log    *slog.Logger
	runID  string
	dbName string // the scratch database, or "" with --database-url
	pool   *pgxpool.Pool
	topo   *topology
	// double is the in-process SendGrid double, nil with a real SendGrid.
	double   *sendgriddouble.Server
	client   *intents.Client
	consumer *amqpconsumer.Consumer
	cutter   *ackCutter
	listener net.Listener
	// cleanups run in reverse order at close.
	cleanups []cleanup
}

type cleanup struct {
	what string
	fn   func(ctx context.Context) error
}

func (a *app) onClose(what string, fn func(ctx context.Context) error) {
	a.cleanups = append(a.cleanups, cleanup{what, fn})
}

// baseURL is the API's root, "http://127.0.0.1:8090".
func (a *app) baseURL() string { return "http://" + a.listener.Addr().String() }

// start sets everything up and starts the dispatcher, the tagger and the
// HTTP server. On error, whatever was set up is torn down.
func start(ctx context.Context, o options, log *slog.Logger, progress io.Writer) (a *app, err error) {
	a = &app{log: log, runID: newRunID(), cutter: &ackCutter{}}
	defer func() {
		if err != nil {
			_ = a.close(context.WithoutCancel(ctx))
			a = nil
		}
	}()

	if err := a.openDatabase(ctx, o, log, progress); err != nil {
		return a, err
	}
	a.topo = newTopology(o.amqpURL, a.runID)
	if err := a.topo.declare(); err != nil {
		return a, err
	}
	a.onClose("delete RabbitMQ topology", func(context.Context) error { return a.topo.delete() })
	fmt.Fprintf(progress, "RabbitMQ at %s: exchange %s, queue %s (dead letters: %s)\n",
		amqpprovider.RedactURL(o.amqpURL), a.topo.Exchange, a.topo.Queue, a.topo.DeadLetterQueue)

	if err := a.startOutbox(ctx, o, log, progress); err != nil {
		return a, err
	}
	if err := a.startTagger(o, log); err != nil {
		return a, err
	}
	if err := a.startHTTP(o, log); err != nil {
		return a, err
	}
	fmt.Fprintf(progress, "API at %s; dispatcher and tagger running\n", a.baseURL())
	return a, nil
}

// openDatabase connects to the database (a scratch one, dropped at close,
// unless o names one), migrates it and creates the example's tables.
func (a *app) openDatabase(ctx context.Context, o options, log *slog.Logger, progress io.Writer) error {
	dbURL := o.databaseURL
	if dbURL == "" {
		a.dbName = "notes_example_" + a.runID
		fmt.Fprintf(progress, "creating scratch database %s\n", a.dbName)
		var err error
		if dbURL, err = createScratchDatabase(ctx, o.serverURL, a.dbName); err != nil {
			return fmt.Errorf("%w (is PostgreSQL running at DATABASE_URL?)", err)
		}
		if !o.keepDatabase {
			a.onClose("drop database "+a.dbName, func(ctx context.Context) error {
				return dropScratchDatabase(ctx, o.serverURL, a.dbName)
			})
		}
	}
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return errors.New("the database URL is not a valid PostgreSQL URL")
	}
	poolCfg.MaxConns = 20
	if a.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	a.onClose("close database pool", func(context.Context) error { a.pool.Close(); return nil })
	if err := a.pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if _, err := migrations.New(a.pool, log).Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return createSchema(ctx, a.pool)
}

// startOutbox builds the providers (the email provider, the RabbitMQ
// publisher), the intents client that records with them, and starts the
// dispatcher that performs them.
func (a *app) startOutbox(ctx context.Context, o options, log *slog.Logger, progress io.Writer) error {
	email, err := a.emailProvider(o, progress)
	if err != nil {
		return err
	}
	publisher, err := amqpprovider.New(amqpprovider.Config{URL: o.amqpURL, Logger: log})
	if err != nil {
		return err
	}
	a.onClose("close RabbitMQ publisher", func(context.Context) error { return publisher.Close() })
	registry, err := providers.NewRegistry(publisher, email)
	if err != nil {
		return err
	}
	if a.client, err = intents.NewClient(a.pool, &intents.Config{Providers: registry, Logger: log}); err != nil {
		return err
	}

	d, err := dispatcher.New(a.pool, &dispatcher.Config{
		Providers:         registry,
		MaxWorkers:        10,
		CallTimeout:       10 * time.Second,
		RetryBackoff:      200 * time.Millisecond,
		RetryBackoffMax:   5 * time.Second,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		SweepInterval:     10 * time.Second,
		Logger:            log,
	})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("start the dispatcher: %w", err)
	}
	a.onClose("stop the dispatcher", d.Stop)
	return nil
}

// createSchema creates the example's tables if they do not exist.
func createSchema(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLockKey)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, createSchemaSQL); err != nil {
		return fmt.Errorf("create the notes tables: %w", err)
	}
	return tx.Commit(ctx)
}

// emailProvider is the SendGrid adapter, pointed at the real SendGrid when
// SENDGRID_API_BASE and SENDGRID_API_KEY are set, at an in-process double
// otherwise.
func (a *app) emailProvider(o options, progress io.Writer) (*sendgridprovider.Provider, error) {
	if o.sendgridKey != "" {
		fmt.Fprintf(progress, "emails go to SendGrid at %s\n", o.sendgridBase)
		return sendgridprovider.New(sendgridprovider.Config{APIKey: o.sendgridKey, BaseURL: o.sendgridBase})
	}
	double, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		return nil, err
	}
	a.double = double
	a.onClose("close the SendGrid double", func(context.Context) error { return double.Close() })
	fmt.Fprintf(progress, "emails go to an in-process SendGrid double at %s\n", double.URL())
	return sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: double.URL()})
}

// startTagger runs the NoteCreated consumer until close.
func (a *app) startTagger(o options, log *slog.Logger) error {
	c, err := amqpconsumer.New(a.client, &amqpconsumer.Config{
		URL:                o.amqpURL,
		Queue:              a.topo.Queue,
		Consumer:           taggerConsumer,
		Handler:            tagger(o.from),
		DeadLetterExchange: a.topo.DeadLetterExchange,
		MaxDeliver:         4,
		ReconnectDelay:     100 * time.Millisecond,
		ReconnectDelayMax:  5 * time.Second,
		ShutdownGrace:      10 * time.Second,
		AMQPConfig:         a.cutter.amqpConfig(),
		Logger:             log,
	})
	if err != nil {
		return err
	}
	a.consumer = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	a.onClose("stop the tagger", func(stopCtx context.Context) error {
		cancel()
		select {
		case err := <-done:
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-stopCtx.Done():
			return errors.New("the tagger did not stop in time")
		}
	})
	return nil
}

// startHTTP serves the API until close.
func (a *app) startHTTP(o options, log *slog.Logger) error {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s (set --addr): %w", o.addr, err)
	}
	a.listener = ln
	api := &api{pool: a.pool, client: a.client, exchange: a.topo.Exchange, log: log}
	srv := &http.Server{
		Handler:           api.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server stopped", "error", err)
		}
	}()
	a.onClose("stop the HTTP server", func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		<-served
		return err
	})
	return nil
}

// close stops and removes everything start set up, in reverse order, each
// step bounded by shutdownGrace. It logs and returns every failure.
func (a *app) close(ctx context.Context) error {
	var errs []error
	for i := len(a.cleanups) - 1; i >= 0; i-- {
		c := a.cleanups[i]
		stepCtx, cancel := context.WithTimeout(ctx, shutdownGrace)
		if err := c.fn(stepCtx); err != nil {
			a.log.Error("shutdown step failed", "step", c.what, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", c.what, err))
		}
		cancel()
	}
	a.cleanups = nil
	return errors.Join(errs...)
}

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

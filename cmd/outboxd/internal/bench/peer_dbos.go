//go:build benchpeers

package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBOS Transact for Go, set up as its documentation shows for enqueueing
// with the caller's writes: the system database is the consumer's database
// (schema "dbos"), a workflow keyed by the message id is enqueued with
// WithEnqueueTransaction(tx) in the consumer's transaction, and a queue
// with WorkerConcurrency = workers runs it; its one step calls the double
// over HTTP.

// dbosPollInterval replaces DBOS's default queue base polling interval
// (1 s): a queue has no other wake-up, and a 1 s poll alone misses a 50 ms
// p99 at any rate.
const dbosPollInterval = 10 * time.Millisecond

const (
	dbosQueue    = "bench"
	dbosWorkflow = "bench_pay"
)

func dbosPeer() e2ePeer {
	return e2ePeer{
		key:  "dbos",
		name: "DBOS Transact",
		setup: fmt.Sprintf("dbos-transact-golang %s: system database = the consumer's database (its own pool of workers+10 connections); "+
			"Enqueue(..., WithEnqueueWorkflowID(message id), WithEnqueueTransaction(tx)) in the consumer's transaction; "+
			"a queue with WorkerConcurrency = workers; the workflow's one step (RunAsStep) calls the double over HTTP; defaults otherwise, "+
			"except the queue's base polling interval %s (default 1 s)",
			moduleVersion("github.com/dbos-inc/dbos-transact-golang"), dbosPollInterval),
		start: startDBOS,
	}
}

type dbosSystem struct {
	env    *e2eEnv
	dctx   dbos.Context
	pool   *pgxpool.Pool
	caller *doubleCaller
}

func startDBOS(ctx context.Context, env *e2eEnv) (e2eSystem, error) {
	pcfg, err := pgxpool.ParseConfig(env.db.url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = int32(min(env.workers+10, 60))
	pcfg.ConnConfig.Tracer = env.tracer
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	s := &dbosSystem{env: env, pool: pool, caller: newDoubleCaller(env.dbl.StripeURL(), env.workers)}
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName:      "outbox-bench",
		SystemDBPool: pool,
		// DBOS logs an error for the dequeue its shutdown cancels.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.dctx = dctx
	dbos.RegisterWorkflow(dctx, s.pay, dbos.WithWorkflowName(dbosWorkflow))
	if _, err := dbos.RegisterQueue(dctx, dbosQueue, dbos.WithWorkerConcurrency(env.workers), dbos.WithQueueBasePollingInterval(dbosPollInterval)); err != nil {
		_ = s.stop(ctx)
		return nil, err
	}
	if err := dbos.Launch(dctx); err != nil {
		_ = s.stop(ctx)
		return nil, err
	}
	return s, nil
}

// pay is the workflow: one step, the call.
func (s *dbosSystem) pay(ctx dbos.Context, seq int64) (string, error) {
	return dbos.RunAsStep(ctx, func(ctx context.Context) (string, error) {
		return "", s.caller.pay(ctx, seq)
	}, dbos.WithStepName("call_stripe"))
}

func (s *dbosSystem) consume(ctx context.Context, seq int64) (int64, error) {
	err := pgx.BeginFunc(ctx, s.env.consumers, func(tx pgx.Tx) error {
		if err := insertMarker(ctx, tx, seq); err != nil {
			return err
		}
		if err := insertBusinessRow(ctx, tx, seq); err != nil {
			return err
		}
		_, err := dbos.Enqueue[string](s.dctx, dbosQueue, dbosWorkflow, seq,
			dbos.WithEnqueueWorkflowID(msgID(seq)), dbos.WithEnqueueTransaction(tx))
		return err
	})
	return seq, err
}

func (s *dbosSystem) stop(context.Context) error {
	err := dbos.Shutdown(s.dctx, 20*time.Second)
	s.pool.Close()
	s.caller.close()
	return err
}

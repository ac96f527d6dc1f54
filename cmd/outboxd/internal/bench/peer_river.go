package bench

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxkit/outbox/dispatcher"
)

// River alone is the naive outbox a user would write with River: the
// consumer inserts a job with InsertTx in its own transaction, and a worker
// calls the provider, then completes the job with JobCompleteTx.

// naiveCallArgs is the naive outbox's job: call the double for Seq.
type naiveCallArgs struct {
	Seq int64 `json:"seq"`
}

func (naiveCallArgs) Kind() string { return "bench_naive_call" }

func (naiveCallArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: "bench"} }

type naiveCallWorker struct {
	river.WorkerDefaults[naiveCallArgs]
	caller *doubleCaller
	pool   interface {
		Begin(context.Context) (pgx.Tx, error)
	}
}

func (w *naiveCallWorker) Work(ctx context.Context, job *river.Job[naiveCallArgs]) error {
	if err := w.caller.pay(ctx, job.Args.Seq); err != nil {
		return err
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func riverPeer() e2ePeer {
	return e2ePeer{
		key:  "river",
		name: "River alone",
		setup: "River " + moduleVersion("github.com/riverqueue/river") + ": InsertTx in the consumer's transaction; a worker calls the double over HTTP and completes with JobCompleteTx; " +
			"MaxWorkers = workers, FetchCooldown as the dispatcher's, FetchPollInterval = " + dispatcher.DefaultFetchPollInterval.String() + " (River's defaults otherwise)",
		start: func(ctx context.Context, env *e2eEnv) (e2eSystem, error) {
			caller := newDoubleCaller(env.dbl.StripeURL(), env.workers)
			ws := river.NewWorkers()
			if err := river.AddWorkerSafely(ws, &naiveCallWorker{caller: caller, pool: env.db.pool}); err != nil {
				return nil, err
			}
			client, err := river.NewClient(riverpgxv5.New(env.db.pool), &river.Config{
				Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: env.workers}},
				Workers:           ws,
				FetchCooldown:     env.r.cfg.FetchCooldown,
				FetchPollInterval: dispatcher.DefaultFetchPollInterval,
				Logger:            env.r.cfg.Logger,
			})
			if err != nil {
				return nil, err
			}
			if err := client.Start(ctx); err != nil {
				return nil, err
			}
			return &riverSystem{env: env, client: client, caller: caller}, nil
		},
	}
}

// moduleVersion is the version of a module this executable is built
// with, as the peers' notes cite it.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

type riverSystem struct {
	env    *e2eEnv
	client *river.Client[pgx.Tx]
	caller *doubleCaller
}

func (s *riverSystem) consume(ctx context.Context, seq int64) (int64, error) {
	err := pgx.BeginFunc(ctx, s.env.consumers, func(tx pgx.Tx) error {
		if err := insertMarker(ctx, tx, seq); err != nil {
			return err
		}
		if err := insertBusinessRow(ctx, tx, seq); err != nil {
			return err
		}
		_, err := s.client.InsertTx(ctx, tx, naiveCallArgs{Seq: seq}, nil)
		return err
	})
	return seq, err
}

func (s *riverSystem) stop(ctx context.Context) error {
	defer s.caller.close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.client.Stop(ctx)
}

package brokerloop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// session is one scripted session: how long it lasts on the test's clock,
// whether it started consuming, and the error it ends with.
type session struct {
	lasts   time.Duration
	started bool
	err     error
}

type testBundle struct {
	ctx     context.Context
	cancel  context.CancelFunc
	now     time.Time
	script  []session
	retries []Retry
	waits   []time.Duration
}

// setup returns a bundle whose loop, with the given ResetAfter, plays
// script, one session per call, on a clock of its own, and ends Run's
// context once the script is played.
func setup(t *testing.T, resetAfter time.Duration, script ...session) (*testBundle, *Loop) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &testBundle{ctx: ctx, cancel: cancel, now: time.Unix(0, 0), script: script}
	l := New(&Config{
		Session: func(context.Context) (bool, error) {
			if len(b.script) == 0 {
				b.cancel()
				return false, errors.New("stopped")
			}
			s := b.script[0]
			b.script = b.script[1:]
			b.now = b.now.Add(s.lasts)
			return s.started, s.err
		},
		Backoff:        Backoff{Base: time.Second, Max: 8 * time.Second},
		ResetAfter:     resetAfter,
		Scrub:          func(err error) error { return errors.New(strings.ReplaceAll(err.Error(), "s3cret", "xxxxx")) },
		Retrying:       func(_ context.Context, r Retry) { b.retries = append(b.retries, r) },
		AlreadyRunning: errors.New("already running"),
		Now:            func() time.Time { return b.now },
		Sleep: func(_ context.Context, d time.Duration) bool {
			b.waits = append(b.waits, d)
			return true
		},
	})
	return b, l
}

func TestLoopBacksOffAndStartsOverAfterAHealthySession(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial amqp://guest:s3cret@host: connection refused")
	b, l := setup(t, time.Minute,
		session{err: refused},
		session{err: refused},
		session{err: refused},
		session{started: true, lasts: time.Second, err: errors.New("lost")}, // too short to start over
		session{started: true, lasts: time.Minute, err: errors.New("lost")}, // healthy
		session{err: refused},
	)
	if err := l.Run(b.ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	wantWaits := []time.Duration{1, 2, 4, 8, 1, 2}
	wantAttempts := []int{1, 2, 3, 4, 1, 2}
	if len(b.retries) != len(wantWaits) {
		t.Fatalf("%d retries reported, want %d: %+v", len(b.retries), len(wantWaits), b.retries)
	}
	for i, r := range b.retries {
		if r.Wait != wantWaits[i]*time.Second || b.waits[i] != r.Wait || r.Attempt != wantAttempts[i] {
			t.Errorf("retry %d: wait %s (slept %s), attempt %d; want %s, attempt %d", i, r.Wait, b.waits[i], r.Attempt, wantWaits[i]*time.Second, wantAttempts[i])
		}
		if r.Started != (i == 3 || i == 4) {
			t.Errorf("retry %d: Started = %v", i, r.Started)
		}
	}
	if msg := b.retries[0].Err.Error(); strings.Contains(msg, "s3cret") || !strings.Contains(msg, "xxxxx") {
		t.Errorf("Retrying saw %q, want it scrubbed", msg)
	}
}

func TestLoopResetAfterZeroStartsOverAfterAnyStartedSession(t *testing.T) {
	t.Parallel()
	b, l := setup(t, 0, session{err: errors.New("down")}, session{err: errors.New("down")}, session{started: true, err: errors.New("lost")})
	_ = l.Run(b.ctx)
	if len(b.retries) != 3 || b.retries[2].Wait != time.Second || b.retries[2].Attempt != 1 {
		t.Fatalf("retries %+v, want the started session's to start over at 1s", b.retries)
	}
}

func TestLoopReportsASessionEndedWithoutAnError(t *testing.T) {
	t.Parallel()
	b, l := setup(t, 0, session{started: true})
	_ = l.Run(b.ctx)
	if len(b.retries) != 1 || b.retries[0].Err == nil || b.retries[0].Err.Error() != errEnded.Error() {
		t.Fatalf("retries %+v, want one reporting errEnded", b.retries)
	}
}

func TestLoopStopsWhenTheContextEndsDuringTheWait(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := 0
	l := New(&Config{
		Session:        func(context.Context) (bool, error) { sessions++; return false, errors.New("down") },
		Backoff:        Backoff{Base: time.Hour, Max: time.Hour},
		Scrub:          func(err error) error { return err },
		Retrying:       func(context.Context, Retry) { cancel() },
		AlreadyRunning: errors.New("already running"),
	})
	// The real Sleep: an hour's wait that ctx's end must cut short.
	if err := l.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if sessions != 1 {
		t.Fatalf("%d sessions, want 1", sessions)
	}
}

func TestLoopRefusesASecondRunUntilTheFirstReturns(t *testing.T) {
	t.Parallel()
	already := errors.New("already running")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inSession := make(chan struct{})
	l := New(&Config{
		Session: func(ctx context.Context) (bool, error) {
			close(inSession)
			<-ctx.Done()
			return true, nil
		},
		Scrub:          func(err error) error { return err },
		Retrying:       func(context.Context, Retry) { t.Error("Retrying called after ctx ended") },
		AlreadyRunning: already,
	})
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	<-inSession
	if err := l.Run(ctx); err != already {
		t.Fatalf("a second Run = %v, want Config.AlreadyRunning", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	// Returned: the loop runs again.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	inSession = make(chan struct{})
	if err := l.Run(ctx2); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after the first returned = %v, want context.Canceled", err)
	}
}

func TestNewRequiresTheConsumersParts(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("New without Scrub did not panic")
		}
	}()
	New(&Config{
		Session:        func(context.Context) (bool, error) { return false, nil },
		Retrying:       func(context.Context, Retry) {},
		AlreadyRunning: errors.New("already running"),
	})
}

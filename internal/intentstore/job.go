package intentstore

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// DispatchQueue is the River queue dispatch jobs run on.
const DispatchQueue = "outbox"

// DispatchMaxAttempts is River's attempt limit for a dispatch job. The
// dispatcher bounds attempts per intent itself, in the intent's row, well
// below this; River's limit only stops a job that keeps crashing its worker,
// and the sweep re-enqueues its intent. River's attempt counter is never
// evidence of anything: it restarts when a job is replaced.
const DispatchMaxAttempts = 100

// DispatchArgs is the River job that asks the dispatcher to work on one
// intent that is not queued: a later attempt, a take-over, a second look.
// The intent row, not the job, is the system of record: a job whose intent
// is queued, terminal or in_doubt completes and does nothing.
type DispatchArgs struct {
	IntentID int64 `json:"intent_id"`
}

// Kind is the River job kind.
func (DispatchArgs) Kind() string { return "outbox_dispatch" }

// InsertOpts makes dispatch jobs unique per intent among live jobs, so the
// sweep can re-enqueue without ever creating a second concurrent job.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       DispatchQueue,
		MaxAttempts: DispatchMaxAttempts,
		UniqueOpts: river.UniqueOpts{
			ByArgs: true,
			ByState: []rivertype.JobState{
				rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
				rivertype.JobStateRunning, rivertype.JobStateScheduled,
			},
		},
	}
}

// dispatchJob is what every dispatch job's river_job row shares, derived
// from intenttype.DispatchArgs's InsertOpts the way River derives it (River's
// insertParamsFromConfigArgsAndOptions), so that the statements that give an
// intent to River can write its job themselves, in the transaction that
// decides it, instead of a second round trip through River's InsertManyTx. TestDispatchJobsMatchRiver proves the
// rows equal River's, unique key included.
type dispatchJob struct {
	kind         string
	queue        string
	priority     int16
	maxAttempts  int16
	uniqueStates int32 // River's bit(8) mask of the states the unique key holds in
	notice       string
}

// riverPriorityDefault is River's default priority (rivercommon.PriorityDefault).
const riverPriorityDefault = 1

// riverStateBit is River's bit index of a job state in unique_states
// (rivershared/uniquestates): the state sets bit 7-index of the mask.
func riverStateBit(s rivertype.JobState) (uint, bool) {
	switch s {
	case rivertype.JobStateAvailable:
		return 7, true
	case rivertype.JobStateCancelled:
		return 6, true
	case rivertype.JobStateCompleted:
		return 5, true
	case rivertype.JobStateDiscarded:
		return 4, true
	case rivertype.JobStatePending:
		return 3, true
	case rivertype.JobStateRetryable:
		return 2, true
	case rivertype.JobStateRunning:
		return 1, true
	case rivertype.JobStateScheduled:
		return 0, true
	}
	return 0, false
}

func newDispatchJob() (dispatchJob, error) {
	args := DispatchArgs{}
	opts := args.InsertOpts()
	u := opts.UniqueOpts
	// jobsCTE computes River's key for ByArgs alone over the args
	// {"intent_id":N}; any other unique option changes River's key.
	if !u.ByArgs || u.ByPeriod != 0 || u.ByQueue || u.ExcludeKind || len(u.ByState) == 0 {
		return dispatchJob{}, errors.New("intentstore: DispatchArgs.InsertOpts has unique options jobsCTE does not reproduce")
	}
	if opts.Queue == "" || opts.MaxAttempts < 1 || opts.Priority < 0 || opts.Priority > 4 || len(opts.Tags) > 0 || len(opts.Metadata) > 0 || opts.Pending || !opts.ScheduledAt.IsZero() {
		return dispatchJob{}, errors.New("intentstore: DispatchArgs.InsertOpts has options jobsCTE does not reproduce")
	}
	var mask int32
	for _, s := range u.ByState {
		bit, ok := riverStateBit(s)
		if !ok {
			return dispatchJob{}, fmt.Errorf("intentstore: unknown River job state %q", s)
		}
		mask |= 1 << (7 - bit)
	}
	priority := opts.Priority
	if priority == 0 {
		priority = riverPriorityDefault
	}
	return dispatchJob{
		kind:         args.Kind(),
		queue:        opts.Queue,
		priority:     int16(priority),
		maxAttempts:  int16(opts.MaxAttempts),
		uniqueStates: mask,
		// River's insert notification payload: fmt's %q of the queue.
		notice: fmt.Sprintf("{\"queue\": %q}", opts.Queue),
	}, nil
}

// notifyLimiter spaces out the insert notifications a Client sends, as
// River's client does for its own inserts (one per FetchCooldown per
// queue): a notification wakes every listening dispatcher, so one per
// cooldown is enough, and a NOTIFY serialises commits briefly.
type notifyLimiter struct {
	cooldown time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last time.Time
}

// due reports whether a notification should be sent now, and if so counts
// it as sent.
func (l *notifyLimiter) due() bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < l.cooldown {
		return false
	}
	l.last = now
	return true
}

// insertJobsCTE inserts a River dispatch job, available at once, for every
// row of the CTE "inserted" (column id): the intents River is to work now
// (the sweep, a hand-over from the queue). The rows are exactly what
// River's InsertManyTx writes for DispatchArgs (see dispatchJob and
// TestDispatchJobsMatchRiver): args {"intent_id":N}; kind, queue,
// priority, max_attempts and the unique-states bitmask from
// DispatchArgs.InsertOpts; metadata and tags empty; created_at and
// scheduled_at the database's now(); and unique_key River's ByArgs key,
// the SHA-256 of "&kind=<kind>&args=<args with sorted keys, compact>". So
// River's unique index sees these jobs as River's own: a second insert for
// an intent whose job is live is skipped, as River skips it.
var insertJobsCTE = jobsCTE("available", "now()")

// scheduledJobsCTE is insertJobsCTE for jobs scheduled @retry_in_us
// microseconds from now (a later attempt), in River's scheduled state:
// River's scheduler makes them available when they are due. A live job of
// the intent that is not running is moved to that time instead.
var scheduledJobsCTE = jobsCTE("scheduled", "now() + @retry_in_us::bigint * interval '1 microsecond'")

func jobsCTE(state, scheduledAt string) string {
	onConflict := `DO NOTHING`
	if state == "scheduled" {
		onConflict = `DO UPDATE SET state = 'scheduled', scheduled_at = EXCLUDED.scheduled_at
        WHERE river_job.state IN ('available', 'scheduled', 'retryable')`
	}
	return `jobs AS (
    INSERT INTO river_job (args, kind, queue, priority, max_attempts, state, scheduled_at, metadata, tags, unique_key, unique_states)
    SELECT jsonb_build_object('intent_id', id), @job_kind::text, @job_queue::text, @job_priority::smallint, @job_max_attempts::smallint,
        '` + state + `', ` + scheduledAt + `, '{}'::jsonb, '{}'::varchar(255)[],
        sha256(convert_to('&kind=' || @job_kind::text || '&args={"intent_id":' || id::text || '}', 'UTF8')),
        nullif(@job_unique_states::integer, 0)::bit(8)
    FROM inserted
    ORDER BY id
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL
            AND unique_states IS NOT NULL
            AND river_job_state_in_bitmask(unique_states, state)
        ` + onConflict + `
)`
}

// enqueueSQL inserts dispatch jobs for existing intents that are pending or
// dispatching and not queued (the sweep), skipping any intent that has a
// live job.
var enqueueSQL = `
WITH inserted AS (
    SELECT id FROM outbox_intents
    WHERE id = ANY(@ids::bigint[]) AND state IN ('pending', 'dispatching') AND NOT queued
),
` + insertJobsCTE + `
SELECT count(*) FROM inserted`

// notifySQL wakes dispatchers listening for new jobs on the dispatch queue,
// as River's own insert does: the channel is River's insert topic in the
// current schema and the payload names the queue. Sent inside a transaction,
// it is delivered when (and only if) it commits.
const notifySQL = `SELECT pg_notify(current_schema() || '.river_insert', @notice)`

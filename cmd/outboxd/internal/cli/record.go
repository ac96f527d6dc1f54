package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/termtext"
)

// recordSummary is what `outboxd record` reports.
type recordSummary struct {
	Values      int  `json:"values"`
	Lines       int  `json:"lines"`
	Messages    int  `json:"messages_recorded"`
	Intents     int  `json:"intents_recorded"`
	Duplicates  int  `json:"duplicates_absorbed"`
	BadValues   int  `json:"bad_values"`
	Interrupted bool `json:"interrupted,omitempty"`
}

// recordHelp is what 'outboxd record --help' says the command does.
const recordHelp = `
Reads messages from FILE, or from standard input when FILE is - or not
given, as a stream of JSON values (one per line, or pretty-printed over
several lines, one after another) and records each exactly as
intents.Consume would: the processed marker and the message's intents
commit together, a message already recorded for its consumer is absorbed
as a duplicate, and a bad value is reported with its number and the line
it starts on, and nothing of it is written. The door for scripts,
backfills and producers not written in Go.

  outboxd record messages.json
  jq -c '.[]' orders.json | outboxd record

Each value:
  {"message_id": "order-42", "consumer": "billing",
   "intents": [{"kind": "stripe.payment_intent", "name": "payment",
                "payload": {"amount": 500, "currency": "usd"},
                "reference": "order-42"}]}

An intent may come after others of its message (by "name") or recorded
before (by "key"), taking fields from their results, and may belong to a
stream performed one intent at a time ("ordering_key"):
  {"kind": "stripe.refund", "name": "refund", "payload": {"amount": 200},
   "after": [{"name": "payment", "fill": {"payment_intent": "provider_ref"}}],
   "ordering_key": "cus_42"}

A pretty-printed value must start its lines after the first indented, as
jq and every JSON printer do: a line starting with '{' begins a new value.
The database must be migrated (outboxd migrate); it is checked before any
input is read. Recording only validates each payload with its provider:
no provider is called and no API key is needed.

Good values are recorded --batch at a time (100 unless set), a batch in
one transaction: a transaction's commit waits for the disk and a few round
trips to the database, and recording one message at a time is mostly
that wait, so a batch records ten times as many messages a second or more
(outboxd bench --only record measures it). A batch is also recorded once
no value has arrived for 100 ms (a slow pipe, a terminal: a value is
recorded soon after it was given, without waiting for the end of the
input) and once its values take 32 MiB. A bad value is still refused
alone: it is reported, nothing of it is written, and the rest of its
batch is recorded. --batch 1 gives each value a transaction of its own.

Exits 1 if any value was bad (the good ones are recorded). Interrupted
(Ctrl-C, SIGTERM), it stops at once and prints what was recorded so far,
and which values were read but not yet recorded, or were being recorded
and may or may not have been (a second Ctrl-C exits at once); feeding the
same input again is safe: what was recorded is absorbed as duplicates.`

func runRecord(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("record", "record [flags] [FILE]", recordHelp, env)
	var dbURL databaseURL
	registerDatabaseFlag(fs, env, &dbURL)
	file := fs.String("file", "-", "input file of JSON values, as FILE; - reads stdin")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	batch := fs.Int("batch", defaultRecordBatch, fmt.Sprintf("good values recorded in one transaction, 1 to %d: a batch records many times as many messages a second as one at a time", maxRecordBatch))
	var maxPayload int
	registerPayloadFlag(fs, &maxPayload)
	var pf providerFlags
	pf.registerForRecording(fs, env)
	operand, err := parseWithOperand(fs, args, env, "FILE")
	if err != nil {
		return err
	}
	if err := checkPayloadFlag(maxPayload); err != nil {
		return err
	}
	if err := checkBatchFlag(*batch); err != nil {
		return err
	}
	givenAs := "--file"
	if operand != "" {
		if flagGiven(fs, "file") {
			return usageErrorf("give the input as FILE or as --file, not both")
		}
		*file, givenAs = operand, "FILE"
	}
	in, closeInput, err := openInput(*file, givenAs, env)
	if err != nil {
		return err
	}
	defer closeInput()
	registry, err := pf.registry(ctx, env, false, nil, nil)
	if err != nil {
		return err
	}
	defer pf.close()
	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	pool, err := openMigratedPool(ctx, dbURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry, MaxPayloadBytes: maxPayload})
	if err != nil {
		return err
	}

	if *file == "-" && isTerminal(env.Stdin) {
		// Nothing typed yet looks like a hang: say what is awaited.
		fmt.Fprintln(env.Stderr, "Reading messages from the terminal: type or paste JSON values, then Ctrl-D to end (or give a FILE: outboxd record messages.json).")
	}
	recorder := ingest.New(client, nil).WithUnknownKindHint(pf.unknownKindHint)
	summary, err := recordValues(ctx, recorder, in, ingest.MaxMessageBytes(maxPayload), *batch, env.Stderr)
	if err := printRecordSummary(env.Stdout, summary, *asJSON); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	if summary.BadValues > 0 {
		return fmt.Errorf("%s (reported above); nothing of them was written", plural(summary.BadValues, "bad value"))
	}
	return nil
}

// openInput opens the input file, or stdin for "-"; an error names how
// the file was given (FILE or --file).
func openInput(file, givenAs string, env Env) (in io.Reader, closeInput func(), err error) {
	if file == "-" {
		return env.Stdin, func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, usageErrorf("%s: %v", givenAs, err)
	}
	return f, func() { f.Close() }, nil
}

// flagGiven reports whether the flag named name was set, on the command
// line or through its OUTBOXD_ variable.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func printRecordSummary(w io.Writer, summary recordSummary, asJSON bool) error {
	if asJSON {
		return writeJSON(w, summary)
	}
	fmt.Fprintf(w, "%s (%s): %s recorded with %s, %s absorbed, %s\n",
		plural(summary.Values, "value"), plural(summary.Lines, "line"), plural(summary.Messages, "message"),
		plural(summary.Intents, "intent"), plural(summary.Duplicates, "duplicate"), plural(summary.BadValues, "bad value"))
	return nil
}

// The batches record groups the good values in: each is one transaction
// (ingest.Recorder.RecordBatch).
const (
	defaultRecordBatch = 100
	maxRecordBatch     = 10_000
	// recordIdleFlush: a batch is recorded once no value has arrived for
	// this long, so that a slow pipe or a terminal records promptly what
	// it was given.
	recordIdleFlush = 100 * time.Millisecond
	// recordBatchBytes: a batch is recorded once its values take more than
	// this, bounding what it holds (a value may take 1 MiB with the default
	// --max-payload-bytes, 512 MiB at most).
	recordBatchBytes = 32 << 20
)

func checkBatchFlag(n int) error {
	if n < 1 || n > maxRecordBatch {
		return usageErrorf("--batch must be between 1 and %d, got %d", maxRecordBatch, n)
	}
	return nil
}

// recordValues records every value read from in, in batches of up to
// batch good values, and reports each bad one on progress. A value may
// take maxValue bytes. It stops at the first error that is not about a
// value (the database, the input, a value too long to cut out), and when
// ctx is cancelled, returning the summary so far with the error.
func recordValues(ctx context.Context, recorder *ingest.Recorder, in io.Reader, maxValue, batch int, progress io.Writer) (recordSummary, error) {
	reader := startReading(ctx, in, maxValue, batch)
	defer reader.stop()
	run := &recordRun{recorder: recorder, progress: progress, size: batch}
	idle := time.NewTimer(recordIdleFlush)
	defer idle.Stop()
	for {
		var idleC <-chan time.Time
		if len(run.batch) > 0 {
			idleC = idle.C
		}
		var err error
		select {
		case <-ctx.Done():
			return run.s, run.interrupted(false)
		case <-idleC:
			err = run.flush(ctx)
		case v, ok := <-reader.values:
			if !ok {
				// The input ended, or the reader stopped at the interrupt.
				if ctx.Err() != nil {
					return run.s, run.interrupted(false)
				}
				err = run.flush(ctx)
				return run.s, err
			}
			reader.taken(v)
			err = run.take(ctx, v)
			idle.Reset(recordIdleFlush)
		}
		if err != nil {
			return run.s, err
		}
	}
}

// valueReader cuts the input into values and decodes them in a goroutine
// of its own, so that an interrupt is noticed while a read from a
// terminal or a pipe blocks, and so that the values of the next batch are
// decoded while one is being recorded. What it holds ahead is bounded:
// a batch's worth of values, and recordBatchBytes of their JSON (or one
// value, however long).
type valueReader struct {
	values chan jsonValue
	held   *semaphore.Weighted
	stop   context.CancelFunc // the channel closes soon after
}

func startReading(ctx context.Context, in io.Reader, maxValue, ahead int) *valueReader {
	readCtx, stop := context.WithCancel(ctx)
	r := &valueReader{values: make(chan jsonValue, ahead), held: semaphore.NewWeighted(recordBatchBytes), stop: stop}
	go func() {
		defer close(r.values)
		scanJSONValues(in, maxValue, func(v jsonValue) bool {
			if v.fatal == nil {
				v.msg, v.decodeErr = decodeValue(v)
			}
			v.held = min(int64(len(v.data)), recordBatchBytes)
			if r.held.Acquire(readCtx, v.held) != nil {
				return false
			}
			select {
			case r.values <- v:
				return true
			case <-readCtx.Done():
				return false
			}
		})
	}()
	return r
}

// taken releases what v held of the reader's bound.
func (r *valueReader) taken(v jsonValue) { r.held.Release(v.held) }

// recordRun is what recordValues carries from one value to the next: the
// summary, and the good values waiting to be recorded.
type recordRun struct {
	recorder *ingest.Recorder
	progress io.Writer
	size     int // values a batch takes
	s        recordSummary
	batch    []batchedValue
	bytes    int // what batch's values take, as JSON
	shown    int // values counted by the last progress line
}

// batchedValue is a good value waiting in the batch.
type batchedValue struct {
	msg          ingest.Message
	number, line int // the value's number, and the line it starts on
}

// take counts v, and reports it if it is bad; otherwise it adds it to the
// batch, recording the batch once it is full.
func (r *recordRun) take(ctx context.Context, v jsonValue) error {
	r.s.Lines = v.lastLine
	if v.fatal != nil {
		// The values before it were read whole: they are recorded.
		if err := r.flush(ctx); err != nil {
			return err
		}
		return v.fatal
	}
	r.s.Values++
	if v.decodeErr != nil {
		r.refuse(r.s.Values, v.line, v.decodeErr)
		r.showProgress()
		return nil
	}
	r.batch = append(r.batch, batchedValue{msg: v.msg, number: r.s.Values, line: v.line})
	r.bytes += len(v.data)
	if len(r.batch) >= r.size || r.bytes > recordBatchBytes {
		return r.flush(ctx)
	}
	return nil
}

// decodeValue decodes a value into its message; its error says why the
// value is bad.
func decodeValue(v jsonValue) (ingest.Message, error) {
	switch {
	case v.bad != nil:
		return ingest.Message{}, v.bad
	case bytes.HasPrefix(v.data, []byte("[")):
		return ingest.Message{}, errors.New("a JSON array, not a message object: give the messages one after another, not in an array (jq -c '.[]' turns one into the other)")
	}
	return ingest.Decode(v.data)
}

func (r *recordRun) refuse(number, line int, err error) {
	r.s.BadValues++
	fmt.Fprintf(r.progress, "value %d (line %d): %s\n", number, line, termtext.Clean(err.Error(), true))
}

// flush records the batch in one transaction, a bad value in it refused
// alone. A database error stops the run: the batches before were
// recorded, this one and the rest were not.
func (r *recordRun) flush(ctx context.Context) error {
	if len(r.batch) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return r.interrupted(false) // nothing of the batch was sent
	}
	msgs := make([]ingest.Message, len(r.batch))
	for i, v := range r.batch {
		msgs[i] = v.msg
	}
	results, err := r.recorder.RecordBatch(ctx, msgs)
	switch {
	case err != nil && ctx.Err() != nil:
		return r.interrupted(true)
	case err != nil:
		it, they := r.pronouns()
		return fmt.Errorf("%s: %w; stopped: the values before %s were recorded, %s and the rest were not", r.span(), err, it, they)
	}
	for i, res := range results {
		switch {
		case res.Refused != nil:
			r.refuse(r.batch[i].number, r.batch[i].line, res.Refused)
		case res.Duplicate:
			r.s.Duplicates++
		default:
			r.s.Messages++
			r.s.Intents += len(res.Intents)
		}
	}
	r.batch, r.bytes = r.batch[:0], 0
	r.showProgress()
	return nil
}

// showProgress prints a line every 1000 values, once none is waiting.
func (r *recordRun) showProgress() {
	if len(r.batch) > 0 || r.s.Values/1000 == r.shown/1000 {
		return
	}
	r.shown = r.s.Values
	fmt.Fprintf(r.progress, "... %d values read, %d recorded, %d duplicates, %d bad\n", r.s.Values, r.s.Messages, r.s.Duplicates, r.s.BadValues)
}

// interrupted is the error of a run stopped by ctx: while committing the
// batch (which may then have been recorded or not), or between values.
func (r *recordRun) interrupted(committing bool) error {
	r.s.Interrupted = true
	const safe = "(feeding the input again is safe: what was recorded is absorbed as duplicates)"
	it, _ := r.pronouns()
	recorded := plural(r.s.Messages, "message")
	switch {
	case committing:
		return fmt.Errorf("interrupted while recording %s, which may or may not have been recorded; %s before %s recorded %s", r.span(), recorded, it, safe)
	case len(r.batch) > 0:
		was := "were"
		if len(r.batch) == 1 {
			was = "was"
		}
		return fmt.Errorf("interrupted after %s; %s %s read but not recorded; %s before %s recorded %s", plural(r.s.Values, "value"), r.span(), was, recorded, it, safe)
	}
	return fmt.Errorf("interrupted after %s; %s before it recorded %s", plural(r.s.Values, "value"), recorded, safe)
}

// span names the batch's values: "value 7 (line 12)", "values 101-200
// (lines 101-230)".
func (r *recordRun) span() string {
	first, last := r.batch[0], r.batch[len(r.batch)-1]
	if len(r.batch) == 1 {
		return fmt.Sprintf("value %d (line %d)", first.number, first.line)
	}
	return fmt.Sprintf("values %d-%d (lines %d-%d)", first.number, last.number, first.line, last.line)
}

// pronouns are the batch's: "it" for one value, "them" and "they" for
// more.
func (r *recordRun) pronouns() (object, subject string) {
	if len(r.batch) == 1 {
		return "it", "it"
	}
	return "them", "they"
}

// jsonValue is one top-level value of the input, or why it could not be
// cut out of it; once read, its message or why it is bad.
type jsonValue struct {
	data     []byte
	line     int   // where the value starts
	lastLine int   // lines read so far
	bad      error // the value is malformed beyond splitting; skip it
	fatal    error // the input cannot be read on; stop

	msg       ingest.Message
	decodeErr error // why the value is bad (bad, or what its decoder says)
	held      int64 // bytes it holds of the reader's bound
}

// scanJSONValues cuts in into top-level JSON values, whether one per line,
// several on a line or pretty-printed over many, and calls emit with each
// until it returns false. It only balances brackets outside strings; the
// values are checked by their decoder. Two rules keep one malformed value
// from swallowing the rest: a line that starts with '{' while a value is
// still open starts a new value (the open one is reported incomplete), and
// anything at the top level that is not an object or an array runs to the
// end of its line.
func scanJSONValues(in io.Reader, maxValue int, emit func(jsonValue) bool) {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, min(64<<10, maxValue)), maxValue)
	c := &valueCutter{emit: emit, max: maxValue}
	for scanner.Scan() {
		if !c.cutLine(scanner.Bytes()) {
			return
		}
	}
	c.end(scanner.Err())
}

// valueCutter is what scanJSONValues carries from one line to the next:
// the value still open, and where the scan is in it.
type valueCutter struct {
	emit     func(jsonValue) bool
	max      int // bytes a value may take
	lineNo   int
	buf      []byte // the open value so far
	start    int    // the line it starts on
	depth    int    // brackets open; 0 outside any value
	inString bool
	escaped  bool
}

func (c *valueCutter) send(v jsonValue) bool {
	v.lastLine = c.lineNo
	return c.emit(v)
}

func (c *valueCutter) reset() { c.buf, c.depth, c.inString, c.escaped = nil, 0, false, false }

// cutLine reads the next line, emitting every value that ends on it. It
// returns false once the scan must stop: emit said so, or the open value
// grew longer than c.max.
func (c *valueCutter) cutLine(line []byte) bool {
	c.lineNo++
	if c.depth > 0 && len(line) > 0 && line[0] == '{' {
		if !c.send(jsonValue{line: c.start, bad: fmt.Errorf("incomplete JSON value: line %d starts a new value before this one ended", c.lineNo)}) {
			return false
		}
		c.reset()
	}
	for i := 0; i < len(line); {
		var more bool
		if c.depth == 0 {
			i, more = c.outside(line, i)
		} else {
			i, more = c.inside(line, i)
		}
		if !more {
			return false
		}
	}
	if c.depth > 0 {
		c.buf = append(c.buf, '\n')
		if len(c.buf) > c.max {
			c.send(jsonValue{fatal: fmt.Errorf("the value starting at line %d: longer than %d bytes, %s", c.start, c.max, messageLimit)})
			return false
		}
	}
	return true
}

// outside reads line from i, outside any value: it skips a blank, opens a
// value at '{' or '[', and emits anything else as a value running to the
// end of the line. It returns where to read on, and false if emit said
// stop.
func (c *valueCutter) outside(line []byte, i int) (int, bool) {
	switch line[i] {
	case ' ', '\t', '\r', '\n':
		return i + 1, true
	case '{', '[':
		// Most values are a line of their own: room for the rest of it.
		c.start, c.depth, c.buf = c.lineNo, 1, append(make([]byte, 0, len(line)-i+1), line[i])
		return i + 1, true
	}
	// A scalar or garbage: the rest of the line.
	return len(line), c.send(jsonValue{data: bytes.TrimSpace(append([]byte(nil), line[i:]...)), line: c.lineNo})
}

// inside reads line from i, inside a value: it adds to the value the
// bytes up to the one that closes it, and emits it, or the rest of the
// line. It returns where to read on, and false if emit said stop.
func (c *valueCutter) inside(line []byte, i int) (int, bool) {
	from := i
	for ; i < len(line); i++ {
		b := line[i]
		switch {
		case c.inString && c.escaped:
			c.escaped = false
		case c.inString && b == '\\':
			c.escaped = true
		case c.inString && b == '"':
			c.inString = false
		case c.inString:
			// Skip to the string's next quote or escape.
			if n := bytes.IndexAny(line[i:], `"\`); n > 0 {
				i += n - 1
			} else if n < 0 {
				i = len(line) - 1
			}
		case b == '"':
			c.inString = true
		case b == '{' || b == '[':
			c.depth++
		case b == '}' || b == ']':
			c.depth--
			if c.depth == 0 {
				v := jsonValue{data: append(c.buf, line[from:i+1]...), line: c.start}
				c.reset()
				return i + 1, c.send(v)
			}
		}
	}
	c.buf = append(c.buf, line[from:]...)
	return i, true
}

// end reports what the input ended on: a read error, or a value still
// open.
func (c *valueCutter) end(err error) {
	if err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d: longer than %d bytes, %s", c.lineNo+1, c.max, messageLimit)
		} else {
			err = fmt.Errorf("read input: %w", err)
		}
		c.send(jsonValue{fatal: err})
		return
	}
	if c.depth > 0 {
		c.send(jsonValue{line: c.start, bad: errors.New("incomplete JSON value: the input ended before it did")})
	}
}

// messageLimit says where a value's limit comes from.
var messageLimit = fmt.Sprintf("the most a message may take (%d times --max-payload-bytes)", ingest.MessageBytesPerPayload)

// plural is "1 value", "2 values".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/ingest"
	"github.com/outboxkit/outbox/cmd/outboxd/internal/termtext"
	"github.com/outboxkit/outbox/intents"
)

// maxRecordValue bounds one input line and one JSON value; an intent's
// payload is bounded far lower by intents.DefaultMaxPayloadBytes.
const maxRecordValue = 4 << 20

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

func runRecord(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("record", "record [flags]", `
Reads messages as a stream of JSON values (one per line, or pretty-printed
over several lines, one after another) and records each exactly as
intents.Consume would: the processed marker and the message's intents
commit together, a message already recorded for its consumer is absorbed
as a duplicate, and a bad value is reported with its number and the line
it starts on, and nothing of it is written. The door for scripts,
backfills and producers not written in Go.

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
input is read.

Exits 1 if any value was bad (the good ones are recorded). Interrupted
(Ctrl-C, SIGTERM), it stops after the value in hand and prints what was
recorded so far; feeding the same input again is safe: what was recorded
is absorbed as duplicates.`, env)
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	file := fs.String("file", "-", "input file of JSON values; - reads stdin")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	var pf providerFlags
	pf.register(fs, env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	in := env.Stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return usageErrorf("--file: %v", err)
		}
		defer f.Close()
		in = f
	}
	registry, err := pf.registry(ctx, env, false, nil, nil)
	if err != nil {
		return err
	}
	defer pf.close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := openMigratedPool(ctx, dbURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		return err
	}

	summary, err := recordValues(ctx, ingest.New(client, nil), in, env.Stderr)
	if *asJSON {
		if err := writeJSON(env.Stdout, summary); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "%s (%s): %s recorded with %s, %s absorbed, %s\n",
			plural(summary.Values, "value"), plural(summary.Lines, "line"), plural(summary.Messages, "message"),
			plural(summary.Intents, "intent"), plural(summary.Duplicates, "duplicate"), plural(summary.BadValues, "bad value"))
	}
	if err != nil {
		return err
	}
	if summary.BadValues > 0 {
		return fmt.Errorf("%s (reported above); nothing of them was written", plural(summary.BadValues, "bad value"))
	}
	return nil
}

// recordValues records every value read from in and reports each bad one
// on progress. It stops at the first error that is not about a value (the
// database, the input), and when ctx is cancelled, returning the summary so
// far with the error.
func recordValues(ctx context.Context, recorder *ingest.Recorder, in io.Reader, progress io.Writer) (recordSummary, error) {
	var s recordSummary
	// The input is read in its own goroutine so that an interrupt is
	// noticed while a read from a terminal or a pipe blocks.
	values := make(chan jsonValue)
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		defer close(values)
		scanJSONValues(in, func(v jsonValue) bool {
			select {
			case values <- v:
				return true
			case <-readCtx.Done():
				return false
			}
		})
	}()
	interrupted := func(detail string) (recordSummary, error) {
		s.Interrupted = true
		return s, fmt.Errorf("interrupted%s; %s before it recorded (feeding the input again is safe: what was recorded is absorbed as duplicates)", detail, plural(s.Messages, "message"))
	}
	for {
		var v jsonValue
		var ok bool
		select {
		case <-ctx.Done():
			return interrupted(" after " + plural(s.Values, "value"))
		case v, ok = <-values:
		}
		if !ok {
			return s, nil
		}
		s.Lines = v.lastLine
		if v.fatal != nil {
			return s, v.fatal
		}
		s.Values++
		where := fmt.Sprintf("value %d (line %d)", s.Values, v.line)
		if v.bad != nil {
			s.BadValues++
			fmt.Fprintf(progress, "%s: %s\n", where, termtext.Clean(v.bad.Error(), true))
			continue
		}
		if bytes.HasPrefix(v.data, []byte("[")) {
			s.BadValues++
			fmt.Fprintf(progress, "%s: a JSON array, not a message object: give the messages one after another, not in an array (jq -c '.[]' turns one into the other)\n", where)
			continue
		}
		res, err := recorder.RecordJSON(ctx, v.data)
		switch {
		case err != nil && ctx.Err() != nil:
			return interrupted(fmt.Sprintf(" while recording %s, which may or may not have been recorded", where))
		case errors.Is(err, ingest.ErrInvalidInput):
			s.BadValues++
			fmt.Fprintf(progress, "%s: %s\n", where, termtext.Clean(err.Error(), true))
		case err != nil:
			return s, fmt.Errorf("%s: %w; stopped: the values before it were recorded, it and the rest were not", where, err)
		case res.Duplicate:
			s.Duplicates++
		default:
			s.Messages++
			s.Intents += len(res.Intents)
		}
		if s.Values%1000 == 0 {
			fmt.Fprintf(progress, "... %d values read, %d recorded, %d duplicates, %d bad\n", s.Values, s.Messages, s.Duplicates, s.BadValues)
		}
	}
}

// jsonValue is one top-level value of the input, or why it could not be
// cut out of it.
type jsonValue struct {
	data     []byte
	line     int   // where the value starts
	lastLine int   // lines read so far
	bad      error // the value is malformed beyond splitting; skip it
	fatal    error // the input cannot be read on; stop
}

// scanJSONValues cuts in into top-level JSON values, whether one per line,
// several on a line or pretty-printed over many, and calls emit with each
// until it returns false. It only balances brackets outside strings; the
// values are checked by their decoder. Two rules keep one malformed value
// from swallowing the rest: a line that starts with '{' while a value is
// still open starts a new value (the open one is reported incomplete), and
// anything at the top level that is not an object or an array runs to the
// end of its line.
func scanJSONValues(in io.Reader, emit func(jsonValue) bool) {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64<<10), maxRecordValue)
	var (
		lineNo   int
		buf      []byte
		start    int
		depth    int
		inString bool
		escaped  bool
	)
	reset := func() { buf, depth, inString, escaped = nil, 0, false, false }
	send := func(v jsonValue) bool {
		v.lastLine = lineNo
		return emit(v)
	}
	for scanner.Scan() {
		lineNo++
		line := scanner.Bytes()
		i := 0
		if depth > 0 && len(line) > 0 && line[0] == '{' {
			if !send(jsonValue{line: start, bad: fmt.Errorf("incomplete JSON value: line %d starts a new value before this one ended", lineNo)}) {
				return
			}
			reset()
		}
		for i < len(line) {
			c := line[i]
			if depth == 0 {
				switch c {
				case ' ', '\t', '\r', '\n':
					i++
					continue
				case '{', '[':
					start, depth, buf = lineNo, 1, append(buf[:0], c)
					i++
					continue
				}
				// A scalar or garbage: the rest of the line.
				if !send(jsonValue{data: bytes.TrimSpace(append([]byte(nil), line[i:]...)), line: lineNo}) {
					return
				}
				i = len(line)
				continue
			}
			buf = append(buf, c)
			i++
			switch {
			case inString && escaped:
				escaped = false
			case inString && c == '\\':
				escaped = true
			case inString && c == '"':
				inString = false
			case inString:
			case c == '"':
				inString = true
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
				if depth == 0 {
					v := jsonValue{data: buf, line: start}
					reset()
					if !send(v) {
						return
					}
				}
			}
		}
		if depth > 0 {
			buf = append(buf, '\n')
			if len(buf) > maxRecordValue {
				send(jsonValue{fatal: fmt.Errorf("the value starting at line %d: longer than %d bytes", start, maxRecordValue)})
				return
			}
		}
	}
	if err := scanner.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d: longer than %d bytes", lineNo+1, maxRecordValue)
		} else {
			err = fmt.Errorf("read input: %w", err)
		}
		send(jsonValue{fatal: err})
		return
	}
	if depth > 0 {
		send(jsonValue{line: start, bad: errors.New("incomplete JSON value: the input ended before it did")})
	}
}

// plural is "1 value", "2 values".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

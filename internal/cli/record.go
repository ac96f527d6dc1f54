package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
)

// maxRecordLine bounds one JSON line; an intent's payload is bounded far
// lower by intents.DefaultMaxPayloadBytes.
const maxRecordLine = 4 << 20

// recordLine is one message in `outboxd record`'s input.
type recordLine struct {
	MessageID string         `json:"message_id"`
	Consumer  string         `json:"consumer"`
	Intents   []recordIntent `json:"intents"`
}

type recordIntent struct {
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	Payload   json.RawMessage `json:"payload"`
	Reference string          `json:"reference"`
}

// recordSummary is what `outboxd record` reports.
type recordSummary struct {
	Lines      int `json:"lines"`
	Messages   int `json:"messages_recorded"`
	Intents    int `json:"intents_recorded"`
	Duplicates int `json:"duplicates_absorbed"`
	BadLines   int `json:"bad_lines"`
}

func runRecord(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("record", "record [flags]", `
Reads messages as JSON lines and records each exactly as intents.Consume
would: the processed marker and the message's intents commit together, a
message already recorded for its consumer is absorbed as a duplicate, and a
bad line is reported with its line number and nothing of it is written.
The door for scripts, backfills and producers not written in Go.

Each line:
  {"message_id": "order-42", "consumer": "billing",
   "intents": [{"kind": "stripe.payment_intent", "name": "payment",
                "payload": {"amount": 500, "currency": "usd"},
                "reference": "order-42"}]}

Exits 1 if any line was bad (the good ones are recorded).`, env)
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	file := fs.String("file", "-", "input file of JSON lines; - reads stdin")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	var pf providerFlags
	pf.register(fs, env, false)
	if err := parse(fs, args); err != nil {
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
	registry, err := pf.registry(env, false, nil)
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, dbURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		return err
	}

	summary, err := recordLines(ctx, client, in, env.Stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(summary); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "%d lines: %d messages recorded with %d intents, %d duplicates absorbed, %d bad lines\n",
			summary.Lines, summary.Messages, summary.Intents, summary.Duplicates, summary.BadLines)
	}
	if summary.BadLines > 0 {
		return fmt.Errorf("%d bad lines (reported above); nothing of them was written", summary.BadLines)
	}
	return nil
}

func recordLines(ctx context.Context, client *intents.Client, in io.Reader, progress io.Writer) (recordSummary, error) {
	var s recordSummary
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64<<10), maxRecordLine)
	for scanner.Scan() {
		s.Lines++
		line := bytes.TrimSpace(scanner.Bytes())
		if len(line) == 0 {
			continue
		}
		res, err := recordOne(ctx, client, line)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			s.BadLines++
			fmt.Fprintf(progress, "line %d: %v\n", s.Lines, err)
		case res.Duplicate:
			s.Duplicates++
		default:
			s.Messages++
			s.Intents += len(res.Intents)
		}
		if s.Lines%1000 == 0 {
			fmt.Fprintf(progress, "... %d lines read, %d recorded, %d duplicates, %d bad\n", s.Lines, s.Messages, s.Duplicates, s.BadLines)
		}
	}
	if err := scanner.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return s, fmt.Errorf("line %d: longer than %d bytes", s.Lines+1, maxRecordLine)
		}
		return s, fmt.Errorf("read input: %w", err)
	}
	return s, nil
}

func recordOne(ctx context.Context, client *intents.Client, line []byte) (intents.Result, error) {
	var msg recordLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return intents.Result{}, fmt.Errorf("not a message object: %v", err)
	}
	if dec.More() {
		return intents.Result{}, errors.New("more than one JSON value on the line")
	}
	if len(msg.Intents) == 0 {
		return intents.Result{}, errors.New(`"intents" is missing or empty: a message needs at least one intent`)
	}
	return client.Consume(ctx, intents.Message{Consumer: msg.Consumer, ID: msg.MessageID},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for _, in := range msg.Intents {
				if len(in.Payload) == 0 {
					return fmt.Errorf("intent %q (%s): \"payload\" is missing", in.Name, in.Kind)
				}
				if err := rec.Record(intents.Intent{Kind: in.Kind, Name: in.Name, Payload: in.Payload, Reference: in.Reference}); err != nil {
					return err
				}
			}
			return nil
		})
}

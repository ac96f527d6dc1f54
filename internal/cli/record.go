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

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/ingest"
)

// maxRecordLine bounds one JSON line; an intent's payload is bounded far
// lower by intents.DefaultMaxPayloadBytes.
const maxRecordLine = 4 << 20

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
	pool, err := openPool(ctx, dbURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		return err
	}

	summary, err := recordLines(ctx, ingest.New(client, nil), in, env.Stderr)
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

func recordLines(ctx context.Context, recorder *ingest.Recorder, in io.Reader, progress io.Writer) (recordSummary, error) {
	var s recordSummary
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64<<10), maxRecordLine)
	for scanner.Scan() {
		s.Lines++
		line := bytes.TrimSpace(scanner.Bytes())
		if len(line) == 0 {
			continue
		}
		res, err := recorder.RecordJSON(ctx, line)
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

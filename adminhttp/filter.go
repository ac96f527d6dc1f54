package adminhttp

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

// filterParams are the query parameters of GET /api/v1/intents and of the
// dashboard's list. state, kind and provider may repeat (or hold a
// comma-separated list); the others may appear once.
var filterParams = []string{"state", "kind", "provider", "consumer", "message_id", "reference", "since", "until", "limit", "cursor"}

// maxRefLength bounds an id or idempotency key in a path: a key is at most
// a consumer (100), a message id (200) and a name (64) with two colons.
const maxRefLength = 400

// requestError is a client mistake: 400 (or Status) with a message that
// names the parameter or field.
type requestError struct {
	Status int
	Field  string
	Msg    string
}

func (e *requestError) Error() string { return e.Msg }

func badRequest(field, format string, args ...any) *requestError {
	return &requestError{Status: 400, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// parseFilter turns query parameters into an audit.Filter. Empty values are
// ignored (a submitted form sends every field). An unknown parameter, an
// unknown state, a malformed time or a limit outside 1..audit.MaxPageSize
// is a *requestError naming the parameter.
func parseFilter(q url.Values, now time.Time) (audit.Filter, error) {
	var f audit.Filter
	for name := range q {
		if !slices.Contains(filterParams, name) {
			return f, badRequest(name, "unknown query parameter %q (known: %s)", name, strings.Join(filterParams, ", "))
		}
	}
	p := filterValues(q)
	var err error
	if f.States, err = p.states(); err != nil {
		return f, err
	}
	f.Kinds = p.list("kind")
	f.Providers = p.list("provider")
	for _, field := range []struct {
		name   string
		target *string
	}{{"consumer", &f.Consumer}, {"message_id", &f.MessageID}, {"reference", &f.Reference}, {"cursor", &f.Cursor}} {
		if *field.target, err = p.single(field.name); err != nil {
			return f, err
		}
	}
	if err := p.created(&f, now); err != nil {
		return f, err
	}
	if f.Limit, err = p.limit(); err != nil {
		return f, err
	}
	return f, nil
}

// filterValues are a filter's query parameters, read the way parseFilter
// reads them: empty values ignored.
type filterValues url.Values

// list is every value of the parameter name, each value split at commas.
func (q filterValues) list(name string) []string {
	var out []string
	for _, v := range q[name] {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// single is the one value of the parameter name, "" when it has none; the
// same value given twice is given once.
func (q filterValues) single(name string) (string, error) {
	var out string
	for _, v := range q[name] {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if out != "" && out != v {
			return "", badRequest(name, "query parameter %q may be given once", name)
		}
		out = v
	}
	if len(out) > maxRefLength || !printable(out) {
		return "", badRequest(name, "query parameter %q must be at most %d printable characters", name, maxRefLength)
	}
	return out, nil
}

// states are the states asked for; on an unknown one, those before it.
func (q filterValues) states() ([]intenttype.State, error) {
	var states []intenttype.State
	for _, st := range q.list("state") {
		state := intenttype.State(st)
		if !state.Valid() {
			return states, badRequest("state", "unknown state %q (known: %v)", st, intenttype.States)
		}
		states = append(states, state)
	}
	return states, nil
}

// created sets f's creation bounds from since and until, relative to now
// for a duration.
func (q filterValues) created(f *audit.Filter, now time.Time) error {
	for _, p := range []struct {
		name   string
		target *time.Time
	}{{"since", &f.CreatedSince}, {"until", &f.CreatedUntil}} {
		v, err := q.single(p.name)
		if err != nil {
			return err
		}
		if v == "" {
			continue
		}
		if *p.target, err = parseTime(v, now); err != nil {
			return badRequest(p.name, "query parameter %q: %v", p.name, err)
		}
	}
	if !f.CreatedSince.IsZero() && !f.CreatedUntil.IsZero() && f.CreatedUntil.Before(f.CreatedSince) {
		return badRequest("until", "query parameter \"until\" is before \"since\"")
	}
	return nil
}

// limit is the page size asked for, 0 when none is.
func (q filterValues) limit() (int, error) {
	limit, err := q.single("limit")
	if err != nil || limit == "" {
		return 0, err
	}
	n, err := strconv.Atoi(limit)
	if err != nil || n < 1 || n > audit.MaxPageSize {
		return 0, badRequest("limit", "query parameter \"limit\" must be a whole number from 1 to %d, got %q", audit.MaxPageSize, limit)
	}
	return n, nil
}

// parseTime accepts RFC 3339 ("2024-05-01T12:00:00Z"), a date
// ("2024-05-01", midnight UTC), a datetime-local form value
// ("2024-05-01T12:00", UTC) or a Go duration meaning that long ago ("24h").
func parseTime(v string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time (2024-05-01T12:00:00Z), a date (2024-05-01) or a duration ago (24h)")
}

// parseID parses a positive intent id.
func parseID(v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, badRequest("id", "malformed intent id %q: want a positive whole number", truncate(v, 40))
	}
	return id, nil
}

// checkRef checks an id or idempotency key from a path.
func checkRef(v string) error {
	if v == "" || len(v) > maxRefLength || !printable(v) {
		return badRequest("id", "malformed intent id or key: want a positive whole number or an idempotency key of at most %d printable characters", maxRefLength)
	}
	return nil
}

// printable reports whether s is valid UTF-8 of printable characters only
// (no NUL, no control characters): ranging over invalid UTF-8 yields
// U+FFFD, which is printable, so the bytes are checked first.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// filterQuery renders f back into query parameters, without the cursor.
func filterQuery(f audit.Filter) url.Values {
	q := url.Values{}
	for _, s := range f.States {
		q.Add("state", string(s))
	}
	for _, k := range f.Kinds {
		q.Add("kind", k)
	}
	for _, p := range f.Providers {
		q.Add("provider", p)
	}
	set := func(name, v string) {
		if v != "" {
			q.Set(name, v)
		}
	}
	set("consumer", f.Consumer)
	set("message_id", f.MessageID)
	set("reference", f.Reference)
	if !f.CreatedSince.IsZero() {
		q.Set("since", f.CreatedSince.Format(time.RFC3339))
	}
	if !f.CreatedUntil.IsZero() {
		q.Set("until", f.CreatedUntil.Format(time.RFC3339))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

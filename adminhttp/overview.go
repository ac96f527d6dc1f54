package adminhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
)

// refreshSeconds is how often the list and reference pages reload
// themselves (a meta refresh of the same URL, filters included), unless the
// URL says refresh=off. Confirmation forms never reload.
const refreshSeconds = 30

// refreshParam pauses auto-refresh when set to "off". It is the
// dashboard's own parameter, removed before the filter is parsed.
const refreshParam = "refresh"

// Chart window: one bucket per minute over the last hour.
const (
	chartBucket  = time.Minute
	chartBuckets = 60
)

// relativeAge says how long before now t was, in words ("3 min ago").
func relativeAge(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 5*time.Second:
		// Including a little in the future: clocks differ.
		if d < -time.Minute {
			return "in " + roughSpan(-d)
		}
		return "just now"
	}
	return roughSpan(d) + " ago"
}

func roughSpan(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// nextLookUp says when the dispatcher next asks the provider about an
// in_doubt intent (its recheck_at), or that it waits for an operator.
func nextLookUp(at *time.Time, now time.Time) string {
	switch {
	case at == nil:
		return "none scheduled: it waits for an operator to resolve or resend it"
	case !at.After(now):
		return fmt.Sprintf("due since %s UTC: the dispatcher's next re-check pass looks it up", at.UTC().Format("2006-01-02 15:04:05"))
	}
	return fmt.Sprintf("in %s (%s UTC), by the dispatcher; until then, or instead, an operator may resolve or resend it",
		roughSpan(at.Sub(now)), at.UTC().Format("2006-01-02 15:04:05"))
}

// refURL is the page of a business reference, under prefix.
func refURL(prefix, ref string) string { return prefix + "/references/" + url.PathEscape(ref) }

// cleanControls replaces what no page should carry raw: C0 control
// characters other than tab, newline and carriage return become their
// visible Control Pictures (U+2400 + c), DEL becomes U+2421, C1 controls
// and invalid UTF-8 become U+FFFD, and the bidi controls (which reorder
// what an operator reads) are shown as their code point, "[U+202E]".
// html/template escapes markup but passes such characters through, in
// text, <title> and attributes alike; the pages' own markup has none.
func cleanControls(page []byte) []byte {
	clean := true
	for i := 0; i < len(page); {
		c := page[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
				clean = false
				break
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(page[i:])
		if r == utf8.RuneError || (r >= 0x80 && r < 0xa0) || termtext.BidiControl(r) {
			clean = false
			break
		}
		i += size
	}
	if clean {
		return page
	}
	out := make([]byte, 0, len(page)+64)
	for i := 0; i < len(page); {
		r, size := utf8.DecodeRune(page[i:])
		i += size
		switch {
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r':
			r = 0x2400 + r
		case r == 0x7f:
			r = 0x2421
		case r >= 0x80 && r < 0xa0:
			r = utf8.RuneError
		case termtext.BidiControl(r):
			out = fmt.Appendf(out, "[U+%04X]", r)
			continue
		}
		out = utf8.AppendRune(out, r)
	}
	return out
}

// refreshState is what the layout needs to reload a page and to offer the
// pause toggle.
type refreshState struct {
	On bool
	// Seconds between reloads.
	Seconds int
	// Toggle is the same page with auto-refresh paused (when On) or
	// resumed.
	Toggle string
}

// takeRefresh removes refresh=off from q and says whether it was there;
// any other value of the parameter is a client error.
func takeRefresh(q url.Values) (paused bool, err error) {
	vs, ok := q[refreshParam]
	if !ok {
		return false, nil
	}
	delete(q, refreshParam)
	for _, v := range vs {
		if v != "off" {
			return false, badRequest(refreshParam, "query parameter %q may only be \"off\" (pauses auto-refresh)", refreshParam)
		}
	}
	return true, nil
}

func newRefresh(path string, q url.Values, paused bool) refreshState {
	toggle := url.Values{}
	for k, v := range q {
		toggle[k] = v
	}
	if !paused {
		toggle.Set(refreshParam, "off")
	}
	u := path
	if enc := toggle.Encode(); enc != "" {
		u += "?" + enc
	}
	return refreshState{On: !paused, Seconds: refreshSeconds, Toggle: u}
}

// choice is one option of a select element.
type choice struct {
	Value    string
	Selected bool
	// Unregistered marks a kind intents have but no provider declares now.
	Unregistered bool
}

// kindChoices lists the registered kinds, and the kinds of recorded
// intents no provider declares any more, marking the selected ones.
func kindChoices(registered []string, stats audit.Stats, selected []string) []choice {
	var out []choice
	for _, k := range registered {
		out = append(out, choice{Value: k, Selected: slices.Contains(selected, k)})
	}
	var extra []string
	for k := range stats.ByKindState {
		if !slices.Contains(registered, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		out = append(out, choice{Value: k, Selected: slices.Contains(selected, k), Unregistered: true})
	}
	return out
}

func providerChoices(registered, selected []string) []choice {
	var out []choice
	for _, p := range registered {
		out = append(out, choice{Value: p, Selected: slices.Contains(selected, p)})
	}
	return out
}

// checkChoices refuses a value that is not one of the choices.
func checkChoices(param string, values []string, choices []choice) error {
	for _, v := range values {
		known := false
		names := make([]string, len(choices))
		for i, c := range choices {
			names[i] = c.Value
			known = known || c.Value == v
		}
		if !known {
			if len(names) == 0 {
				names = []string{"none registered"}
			}
			return badRequest(param, "unknown %s %q (known: %s)", param, truncate(v, 60), strings.Join(names, ", "))
		}
	}
	return nil
}

// chart is the activity chart's geometry, computed here so the template
// only places it in an inline SVG.
type chart struct {
	Width, Height     int
	Left, Right       int
	Top, Bottom       int
	Max               int
	MaxY, MidY        int
	Mid               int
	Series            []chartSeries
	BacklogNow        int
	StartUTC, NowUTC  string
	StartLabel, Label string
}

type chartSeries struct {
	Name   string
	Class  string
	Points string
	Total  int
	Last   int
	Desc   string
}

func newChart(a audit.Activity, now time.Time) chart {
	c := chart{Width: 1200, Height: 170, Left: 36, Right: 1190, Top: 10, Bottom: 140, BacklogNow: a.BacklogNow}
	c.Max = 1
	for _, s := range [][]int{a.Recorded, a.Succeeded, a.InDoubt, a.Backlog} {
		for _, v := range s {
			c.Max = max(c.Max, v)
		}
	}
	top := niceCeil(c.Max)
	c.Max = top
	c.Mid = top / 2
	c.MaxY = c.Top
	c.MidY = c.Bottom - (c.Bottom-c.Top)*c.Mid/c.Max
	n := len(a.Recorded)
	x := func(i int) float64 {
		return float64(c.Left) + (float64(i)+0.5)*float64(c.Right-c.Left)/float64(max(n, 1))
	}
	y := func(v int) float64 {
		return float64(c.Bottom) - float64(v)*float64(c.Bottom-c.Top)/float64(c.Max)
	}
	for _, s := range []struct {
		name, class string
		values      []int
		desc        string
	}{
		{"recorded", "recorded", a.Recorded, "intents recorded per minute"},
		{"succeeded", "succeeded", a.Succeeded, "intents performed (succeeded) per minute"},
		{"in_doubt", "in_doubt", a.InDoubt, "intents now in_doubt, by the minute they last changed"},
		{"backlog", "backlog", a.Backlog, "pending and dispatching intents at the end of each minute (reconstructed)"},
	} {
		var pts []string
		cs := chartSeries{Name: s.name, Class: s.class, Desc: s.desc}
		for i, v := range s.values {
			pts = append(pts, strconv.FormatFloat(x(i), 'f', 1, 64)+","+strconv.FormatFloat(y(v), 'f', 1, 64))
			cs.Total += v
			cs.Last = v
		}
		cs.Points = strings.Join(pts, " ")
		c.Series = append(c.Series, cs)
	}
	// The backlog is a level, not a flow: its total means nothing.
	c.Series[3].Total = a.BacklogNow
	c.StartUTC = a.Since.UTC().Format("2006-01-02 15:04 UTC")
	c.NowUTC = now.UTC().Format("2006-01-02 15:04:05 UTC")
	c.StartLabel = roughSpan(now.Sub(a.Since).Round(time.Minute)) + " ago"
	return c
}

// niceCeil is the smallest of 1, 2, 5, 10, 20, 50, ... at least v.
func niceCeil(v int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

type referenceBody struct {
	Reference string
	Intents   []intenttype.Intent
	More      bool
	ListURL   string
}

// referencePage shows every intent of one business reference, in the order
// they were recorded.
func (h *Handler) referencePage(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("ref")
	q := r.URL.Query()
	paused, err := takeRefresh(q)
	if err != nil {
		return err
	}
	if len(q) > 0 {
		return badRequest("", "this page takes no query parameters but %q", refreshParam)
	}
	if ref == "" || len(ref) > 255 || !printable(ref) {
		return badRequest("reference", "malformed reference: want at most 255 printable characters")
	}
	page, err := h.cfg.Audit.List(r.Context(), audit.Filter{Reference: ref, Limit: audit.MaxPageSize})
	if err != nil {
		return err
	}
	if len(page.Intents) == 0 {
		return &requestError{Status: http.StatusNotFound, Field: "reference", Msg: fmt.Sprintf("no intent has reference %q", truncate(ref, 80))}
	}
	body := referenceBody{Reference: ref, Intents: page.Intents, More: page.NextCursor != "",
		ListURL: h.path("/?" + url.Values{"reference": {ref}}.Encode())}
	slices.Reverse(body.Intents) // oldest (first recorded) first
	h.renderRefresh(w, r, http.StatusOK, "reference.html", "Reference "+ref, body, newRefresh(refURL(h.cfg.Prefix, ref), url.Values{}, paused))
	return nil
}

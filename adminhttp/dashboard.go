package adminhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

//go:embed templates/*.html static/style.css
var assets embed.FS

// parseTemplates parses the pages; now is the clock relative ages are
// computed from.
func parseTemplates(now func() time.Time, prefix string) (*template.Template, error) {
	funcs := template.FuncMap{
		"fmtTime": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"fmtTimePtr": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"ago":     func(t time.Time) string { return relativeAge(now(), t) },
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"refURL":  func(ref string) string { return refURL(prefix, ref) },
		"duration": func(d time.Duration) string {
			if d <= 0 {
				return "none"
			}
			return humanDuration(d)
		},
		"truncate": truncate,
		"prettyJSON": func(raw json.RawMessage) string {
			if len(raw) == 0 || string(raw) == "null" {
				return "(hidden)"
			}
			var b bytes.Buffer
			if err := json.Indent(&b, raw, "", "  "); err != nil {
				return string(raw)
			}
			return b.String()
		},
		"verb":         func(action string) string { return actions[action].verb },
		"mayHaveActed": audit.MayHaveActedNote,
		"outcome":      func(o string) string { return bulkOutcomeWords[o] },
		"nextLookUp":   func(at *time.Time) string { return nextLookUp(at, now()) },
	}
	t, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("adminhttp: parse templates: %w", err)
	}
	return t, nil
}

func humanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func (h *Handler) styleCSS(w http.ResponseWriter, _ *http.Request) {
	css, _ := assets.ReadFile("static/style.css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write(css)
}

// pageData is what every page template gets.
type pageData struct {
	Where where
	// Base is Config.Prefix: every link of a page starts with it.
	Base     string
	Title    string
	CSRF     string
	TokenSet bool
	RiverUI  bool
	Refresh  refreshState
	Body     any
}

type pageHandler func(w http.ResponseWriter, r *http.Request) error

// page authenticates a dashboard request (sending a browser without a
// session to /login), starts a session when no token is configured, and
// checks the CSRF token of every POST not authenticated by bearer token.
func (h *Handler) page(serve pageHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := h.authenticate(r)
		if a.storeErr != nil {
			h.renderError(w, r, http.StatusServiceUnavailable, "Your session could not be checked: the database does not answer. Try again in a moment.")
			return
		}
		switch a.kind {
		case authForged:
			h.renderError(w, r, http.StatusUnauthorized, "The bearer token is not right.")
			return
		case authNone:
			if r.Method == http.MethodGet {
				h.toSignIn(w, r)
				return
			}
			h.renderError(w, r, http.StatusUnauthorized, "Your session has expired: sign in again.")
			return
		case authOpen:
			if a.session == "" {
				v, err := h.keys.newSession(h.cfg.Now())
				if err != nil {
					h.renderError(w, r, http.StatusInternalServerError, "Could not start a session.")
					return
				}
				h.setSessionCookie(w, r, v)
				a.session = v
			}
		}
		run := func() {
			r := r.WithContext(context.WithValue(r.Context(), ctxKey{}, a))
			if err := serve(w, r); err != nil {
				status, _, msg := h.classify(r, err)
				h.renderError(w, r, status, msg)
			}
		}
		if r.Method != http.MethodPost {
			run()
			return
		}
		h.withBody(w, r, func() {
			if err := r.ParseForm(); err != nil {
				if bodyTooLarge(err) != nil {
					h.renderError(w, r, http.StatusRequestEntityTooLarge, "The form is too large.")
				} else {
					h.renderError(w, r, http.StatusBadRequest, "The form could not be read.")
				}
				return
			}
			if a.needsCSRF() && !h.keys.validCSRF(a.session, r.PostForm.Get(csrfField)) {
				h.renderError(w, r, http.StatusForbidden, "The form's CSRF token is missing or stale: reload the page and try again.")
				return
			}
			run()
		})
	})
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, body any) {
	h.renderRefresh(w, r, status, name, title, body, refreshState{})
}

// renderRefresh renders a page that reloads itself when refresh.On.
func (h *Handler) renderRefresh(w http.ResponseWriter, r *http.Request, status int, name, title string, body any, refresh refreshState) {
	a := authFrom(r.Context())
	data := pageData{Where: h.deployment(), Base: h.cfg.Prefix, Title: title, TokenSet: h.keys.tokenSet, RiverUI: h.riverUI != nil, Refresh: refresh, Body: body}
	if a.session != "" {
		data.CSRF = h.keys.csrfToken(a.session)
	}
	var buf bytes.Buffer
	if err := h.pages.ExecuteTemplate(&buf, name, data); err != nil {
		h.cfg.Logger.ErrorContext(r.Context(), "render page", "template", name, "error", err)
		http.Error(w, "internal error (logged by the server)", http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(cleanControls(buf.Bytes()))
}

type errorBody struct {
	Status  int
	Message string
}

func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error.html", http.StatusText(status), errorBody{Status: status, Message: msg})
}

// stateCount is one state's count, linking to the list filtered by it.
type stateCount struct {
	State  intenttype.State
	Count  int
	Active bool
}

type listBody struct {
	Chart     chart
	Kinds     []choice
	Providers []choice
	Paused    bool
	Counts    []stateCount
	Total     int
	Oldest    time.Duration
	// CountedAgo is the age of the counts when the page shows a count
	// shared with other readers (see sharedReuseFactor), a second old or
	// more; 0 when they are this request's.
	CountedAgo time.Duration
	Form       url.Values
	Checked    map[string]bool
	States     []intenttype.State
	Page       audit.Page
	NextURL    string
	FirstURL   string
	Error      string
	// Bulk offers the bulk actions on the filter's intents.
	Bulk []bulkLink
}

func (h *Handler) listPage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	paused, perr := takeRefresh(q)
	f, ferr := parseFilter(q, h.cfg.Now())
	if perr != nil {
		ferr = perr
	}
	links := listLinks{root: h.path("/"), filter: f, paused: paused}
	if ferr == nil && hasEmpty(q) {
		// A submitted filter form sends every field: keep the URL short.
		http.Redirect(w, r, links.at(f.Cursor), http.StatusSeeOther)
		return nil
	}
	activity := make(chan error, 1)
	var timed timedActivity
	go func() {
		var err error
		timed, _, err = h.activity.get(r.Context())
		activity <- err
	}()
	stats, countedAgo, err := h.stats.get(r.Context())
	if err != nil {
		return err
	}
	body := listBody{Form: q, Checked: map[string]bool{}, States: intenttype.States, Paused: paused}
	countedAgo += stats.ReusedAge // the dispatchers' count, shared once more
	if countedAgo >= time.Second {
		body.CountedAgo = countedAgo
	}
	body.Kinds = kindChoices(h.cfg.Audit.Kinds(), stats, f.Kinds)
	body.Providers = providerChoices(h.cfg.Audit.Providers(), f.Providers)
	if ferr == nil {
		// The choices are all there is: a value that is none of them would
		// silently match nothing.
		ferr = checkListChoices(f, body.Kinds, body.Providers)
	}
	status := http.StatusOK
	if ferr != nil {
		var reqErr *requestError
		if !errors.As(ferr, &reqErr) {
			return ferr
		}
		body.Error, status = reqErr.Msg, reqErr.Status
	}
	body.countStates(f, stats)
	if ferr == nil {
		if status, err = h.listIntents(r.Context(), &body, links); err != nil {
			return err
		}
	}
	if status == http.StatusOK && len(body.Page.Intents) > 0 {
		body.Bulk = h.bulkLinks(f)
	}
	if err := <-activity; err != nil {
		return err
	}
	body.Chart = newChart(timed.activity, timed.now)
	refresh := refreshState{}
	if status == http.StatusOK {
		refresh = newRefresh(h.path("/"), q, paused)
	}
	h.renderRefresh(w, r, status, "list.html", "Intents", body, refresh)
	return nil
}

// listLinks makes the list's links for a filter, keeping a paused page
// paused.
type listLinks struct {
	// root is the list's path.
	root   string
	filter audit.Filter
	paused bool
}

// at links to the page that starts at cursor, the first page for "".
func (l listLinks) at(cursor string) string {
	v := filterQuery(l.filter)
	if l.paused {
		v.Set(refreshParam, "off")
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	return l.root + "?" + v.Encode()
}

// timedActivity is the activity chart's figures, with the time they run
// to.
type timedActivity struct {
	activity audit.Activity
	now      time.Time
}

// readActivity reads the activity chart's figures up to now. It is the
// page's longest read (it rolls up what finished since the last roll-up,
// then reads the backlog): the page runs it beside its other reads, on a
// connection of its own, through h.activity.
func (h *Handler) readActivity(ctx context.Context) (timedActivity, error) {
	now := h.cfg.Now()
	since := now.Truncate(chartBucket).Add(-(chartBuckets - 1) * chartBucket)
	a, err := h.cfg.Audit.Activity(ctx, since, chartBucket, chartBuckets)
	return timedActivity{a, now}, err
}

// checkListChoices refuses a kind or a provider the list offers no choice
// for.
func checkListChoices(f audit.Filter, kinds, providers []choice) error {
	if err := checkChoices("kind", f.Kinds, kinds); err != nil {
		return err
	}
	return checkChoices("provider", f.Providers, providers)
}

// countStates fills the state filter's boxes and each state's count.
func (b *listBody) countStates(f audit.Filter, stats audit.Stats) {
	for _, st := range f.States {
		b.Checked[string(st)] = true
	}
	for _, st := range intenttype.States {
		n := stats.ByState[st]
		b.Total += n
		b.Counts = append(b.Counts, stateCount{State: st, Count: n, Active: len(f.States) == 1 && f.States[0] == st})
	}
	b.Oldest = stats.OldestPendingAge
}

// listIntents reads the page of intents links.filter selects into body,
// with the links to the next and the first page. A filter the store refuses
// is shown on the page, with status 400.
func (h *Handler) listIntents(ctx context.Context, body *listBody, links listLinks) (status int, err error) {
	f := links.filter
	status = http.StatusOK
	page, err := h.cfg.Audit.List(ctx, f)
	if err != nil {
		if !errors.Is(err, audit.ErrInvalidFilter) {
			return 0, err
		}
		body.Error = err.Error()
		status = http.StatusBadRequest
	}
	body.Page = page
	if page.NextCursor != "" {
		body.NextURL = links.at(page.NextCursor)
	}
	if f.Cursor != "" {
		body.FirstURL = links.at("")
	}
	return status, nil
}

func hasEmpty(q url.Values) bool {
	for _, vs := range q {
		for _, v := range vs {
			if strings.TrimSpace(v) == "" {
				return true
			}
		}
	}
	return false
}

type detailBody struct {
	Detail  audit.Detail
	Actions []string
	Done    string
	// Reveal is the state of the page's reveal form.
	Reveal revealForm
}

func (h *Handler) detailPage(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("ref")
	if err := checkRef(ref); err != nil {
		return err
	}
	d, err := h.cfg.Audit.Get(r.Context(), ref)
	if err != nil {
		return err
	}
	body := detailBody{Detail: d, Actions: offered(d.Intent.State)}
	if done := r.URL.Query().Get("done"); actions[done].verb != "" {
		body.Done = done
	}
	h.render(w, r, http.StatusOK, "detail.html", fmt.Sprintf("Intent %d", d.Intent.ID), body)
	return nil
}

// offered lists the actions the dashboard offers for an intent in state.
func offered(state intenttype.State) []string {
	var out []string
	for _, name := range []string{"retry", "resolve", "cancel"} {
		for _, from := range actions[name].kind.AllowedFrom() {
			if from == state {
				out = append(out, name)
			}
		}
	}
	return out
}

type confirmBody struct {
	Intent  intenttype.Intent
	Action  string
	Allowed bool
	From    []intenttype.State
	Error   string
	Reason  string
	As      string
	Actor   string
	// ProviderRef is a resolve's provider reference, as typed.
	ProviderRef string
	// ActionID is the form's action identity: a form posted twice (a
	// double click, a reload after a lost answer) is applied once.
	ActionID string
	// SeenState and SeenVersion are the intent as the confirmation page
	// first showed it: a form sent back with an error keeps them, so that
	// a second submit still acts only on what the operator checked.
	SeenState   intenttype.State
	SeenVersion intenttype.Version
}

func (h *Handler) loadForAction(r *http.Request) (confirmBody, error) {
	action := r.PathValue("action")
	if actions[action].verb == "" {
		return confirmBody{}, &requestError{Status: http.StatusNotFound, Msg: fmt.Sprintf("unknown action %q (known: retry, cancel, resolve)", truncate(action, 40))}
	}
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return confirmBody{}, err
	}
	d, err := h.cfg.Audit.Get(r.Context(), strconv.FormatInt(id, 10))
	if err != nil {
		return confirmBody{}, err
	}
	b := confirmBody{Intent: d.Intent, Action: action, From: actions[action].kind.AllowedFrom(), ActionID: newFormActionID(),
		SeenState: d.Intent.State, SeenVersion: d.Intent.Version()}
	for _, from := range b.From {
		b.Allowed = b.Allowed || from == d.Intent.State
	}
	return b, nil
}

func (h *Handler) confirmPage(w http.ResponseWriter, r *http.Request) error {
	b, err := h.loadForAction(r)
	if err != nil {
		return err
	}
	b.As = string(intenttype.StateSucceeded)
	h.render(w, r, http.StatusOK, "confirm.html", fmt.Sprintf("%s intent %d", actions[b.Action].verb, b.Intent.ID), b)
	return nil
}

func (h *Handler) actionSubmit(w http.ResponseWriter, r *http.Request) error {
	b, err := h.loadForAction(r)
	if err != nil {
		return err
	}
	b.Reason, b.As, b.Actor = r.PostForm.Get("reason"), r.PostForm.Get("as"), strings.TrimSpace(r.PostForm.Get("actor"))
	b.ProviderRef = r.PostForm.Get("provider_ref")
	again := func(status int, msg string) error {
		b.Error = msg
		h.render(w, r, status, "confirm.html", fmt.Sprintf("%s intent %d", actions[b.Action].verb, b.Intent.ID), b)
		return nil
	}
	if r.PostForm.Get("confirmed") != "yes" {
		return again(http.StatusBadRequest, "Tick the confirmation box first.")
	}
	if strings.TrimSpace(b.Reason) == "" {
		return again(http.StatusBadRequest, "Give a reason: it goes into the intent's event log.")
	}
	actor := dashboardActor(b.Actor)
	// The action applies only if the intent is still in the state and at
	// the version the operator saw on the confirmation page, and once
	// however often the form is posted.
	if id := r.PostForm.Get("action_id"); id != "" {
		b.ActionID = id
	}
	if seen := r.PostForm.Get("seen_state"); seen != "" {
		b.SeenState = intenttype.State(seen)
	}
	if v, err := intenttype.ParseVersion(r.PostForm.Get("seen_version")); err == nil {
		b.SeenVersion = v
	}
	req := actionRequest{Reason: b.Reason, IfState: string(b.SeenState), IfVersion: b.SeenVersion.String(), ActionID: b.ActionID}
	if b.Action == "resolve" {
		req.As = b.As
		req.ProviderRef = strings.TrimSpace(b.ProviderRef)
	}
	if _, err := h.act(r, b.Intent.ID, b.Action, req, actor); err != nil {
		status, _, msg := h.classify(r, err)
		if status >= 500 {
			return err
		}
		return again(status, msg)
	}
	http.Redirect(w, r, h.path(fmt.Sprintf("/intents/%d?done=%s", b.Intent.ID, b.Action)), http.StatusSeeOther)
	return nil
}

type loginBody struct {
	// TokenSource is Config.TokenSource: where the token is found.
	TokenSource string
	Next        string
	Error       string
}

// maxNextLen bounds a post-login redirect target.
const maxNextLen = 2048

// safeNext keeps a post-login redirect on this handler: it returns next
// when it is a clean local path under prefix, and the dashboard's root
// otherwise.
//
// Browsers drop tabs and newlines anywhere in a URL, trim leading control
// characters and spaces, and read '\' as '/', so "/\t/evil.example" or
// "/\\evil.example" is followed to another host just like
// "//evil.example". Only printable ASCII without spaces or backslashes is
// accepted (a path this handler sent is escaped to that), it must begin
// with exactly one '/', and it must parse as a path with neither scheme
// nor host whose decoded form passes the same rules.
func safeNext(prefix, next string) string {
	root := prefix + "/"
	if len(next) == 0 || len(next) > maxNextLen || next[0] != '/' {
		return root
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return root
		}
	}
	if len(next) > 1 && next[1] == '/' {
		return root
	}
	// Decoded, the path must pass the same rules: a proxy or a later hop
	// may decode "/%2F%2Fevil.example" into "//evil.example".
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") ||
		strings.ContainsFunc(u.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '\\' }) {
		return root
	}
	// Elsewhere on the host is another application's.
	if !strings.HasPrefix(u.Path, root) {
		return root
	}
	return next
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(h.cfg.Prefix, r.URL.Query().Get("next"))
	if !h.keys.tokenSet || h.authenticate(r).kind == authCookie {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login.html", "Sign in", loginBody{TokenSource: h.cfg.TokenSource, Next: next})
}

// login is the sign-in form's POST: unauthenticated, so its body counts
// among MaxConcurrentBodies like any other.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	h.withBody(w, r, func() { h.loginForm(w, r) })
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		h.renderError(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	next := safeNext(h.cfg.Prefix, r.PostForm.Get("next"))
	if !h.keys.tokenSet {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	client := clientKey(r)
	if ok, wait := h.logins.take(client); !ok {
		secs := int64((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		h.cfg.Logger.DebugContext(r.Context(), "admin sign-in refused: too many failed sign-ins", "remote_addr", r.RemoteAddr, "retry_after_seconds", secs)
		h.render(w, r, http.StatusTooManyRequests, "login.html", "Sign in", loginBody{TokenSource: h.cfg.TokenSource, Next: next, Error: fmt.Sprintf("Too many failed sign-ins from your address: try again in %d seconds.", secs)})
		return
	}
	if !h.keys.tokenMatches(strings.TrimSpace(r.PostForm.Get("token"))) {
		h.cfg.Logger.WarnContext(r.Context(), "admin sign-in refused: wrong token", "remote_addr", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login.html", "Sign in", loginBody{TokenSource: h.cfg.TokenSource, Next: next, Error: "That token is not right."})
		return
	}
	h.logins.refund(client)
	now := h.cfg.Now()
	v, err := h.keys.newSession(now)
	if err == nil {
		err = h.sessions.create(r.Context(), v, now, now.Add(h.cfg.SessionTTL))
	}
	if err != nil {
		h.cfg.Logger.WarnContext(r.Context(), "admin sign-in failed: could not start a session", "remote_addr", r.RemoteAddr, "error", err)
		h.renderError(w, r, http.StatusServiceUnavailable, "Could not start a session: the database does not answer. Try again in a moment.")
		return
	}
	h.setSessionCookie(w, r, v)
	h.cfg.Logger.InfoContext(r.Context(), "admin sign-in", "remote_addr", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server, for every process, then in the
// browser.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) error {
	if v := h.signedSession(r); v != "" && h.keys.tokenSet {
		if err := h.sessions.revoke(r.Context(), v); err != nil {
			return fmt.Errorf("end the session: %w", err)
		}
	}
	h.clearSessionCookie(w, r)
	target := h.path("/login")
	if !h.keys.tokenSet {
		target = h.path("/")
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil
}

// newFormActionID is a confirmation form's action identity.
func newFormActionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "form_" + hex.EncodeToString(b[:])
}

// toSignIn sends a browser without a session to the sign-in page, which
// brings it back to the page it asked for.
func (h *Handler) toSignIn(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, h.path("/login?next="+url.QueryEscape(r.URL.RequestURI())), http.StatusSeeOther)
}

// dashboardActor is the actor an operator's action on the dashboard is
// recorded with: "dashboard", or "dashboard:<name>" when they gave one.
func dashboardActor(name string) string {
	if name = strings.TrimSpace(name); name != "" {
		return "dashboard:" + name
	}
	return "dashboard"
}

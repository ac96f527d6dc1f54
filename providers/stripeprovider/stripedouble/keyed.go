package stripedouble

import (
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/internal/idemstore"
)

// beginPost counts and authorizes a POST and parses its form, answering
// the request itself when it goes no further.
func (s *Server) beginPost(w http.ResponseWriter, r *http.Request) (reqID string, ok bool) {
	s.countRequest()
	reqID = newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return reqID, false
	}
	if err := r.ParseForm(); err != nil {
		s.writeError(w, r, reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Message: "Invalid request body: " + err.Error()})
		return reqID, false
	}
	return reqID, true
}

// The idempotency_error messages for a key reused with other parameters
// or on another endpoint. The create endpoint keeps the wording it has
// always answered with; the endpoints added later for refunds, captures
// and cancels also name the endpoint, the likelier mistake among them.
const (
	mismatchParams   = "Keys for idempotent requests can only be used with the same parameters they were first used with."
	mismatchEndpoint = "Keys for idempotent requests can only be used with the same parameters they were first used with, and for the same endpoint."
)

// keyedPost runs a POST (a create, a refund, a capture, a cancel): one
// fault drawn from Faults() and applied as Handler documents, and the
// Idempotency-Key honoured as Stripe does (a saved answer replayed with
// Idempotent-Replayed, a 500 saved, 409 while in flight, 400
// idempotency_error, worded by mismatch, for other parameters or another
// endpoint).
//
// check validates the request's parameters before anything is done; its
// 400 is not saved. act does the work under the double's rules and returns
// the answer, and whether to save it: a refusal because of an object's
// state (nothing done) is not saved, so a retry executes afresh.
func (s *Server) keyedPost(w http.ResponseWriter, r *http.Request, reqID, mismatch string, check func() *apiError, act func() (savedResponse, bool)) {
	f := s.faults.Next()
	if s.failAtEdge(w, r, reqID, f) {
		return
	}
	claim, ok := s.claimKey(w, r, reqID, mismatch, f)
	if !ok {
		return
	}
	if e := check(); e != nil {
		claim.Release()
		s.writeError(w, r, reqID, http.StatusBadRequest, *e)
		return
	}
	if f.Kind == fault.ErrorBefore { // 500: execution started, nothing done, saved
		s.countFault(f.Kind)
		resp := savedResponse{status: http.StatusInternalServerError, body: serverErrorBody(http.StatusInternalServerError), requestID: reqID}
		claim.Finish(resp)
		s.write(w, r, reqID, resp.status, resp.body)
		return
	}
	resp, save := act()
	if !save {
		claim.Release()
		s.write(w, r, reqID, resp.status, resp.body)
		return
	}
	s.finishKeyed(w, r, reqID, f, claim, resp)
}

// failAtEdge applies a fault that strikes before the idempotency layer (a
// fault.RateLimit, a fault.ErrorBefore other than 500), so nothing is saved,
// and reports whether it answered.
func (s *Server) failAtEdge(w http.ResponseWriter, r *http.Request, reqID string, f fault.Fault) bool {
	switch {
	case f.Kind == fault.RateLimit:
		s.countFault(f.Kind)
		secs := int64(math.Ceil(f.RetryAfterOrDefault().Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		s.writeError(w, r, reqID, http.StatusTooManyRequests, apiError{
			Type:    "invalid_request_error",
			Code:    "rate_limit",
			Message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.",
			DocURL:  "https://stripe.com/docs/error-codes/rate-limit",
		})
		return true
	case f.Kind == fault.ErrorBefore && f.StatusOr500() != http.StatusInternalServerError:
		s.countFault(f.Kind)
		s.write(w, r, reqID, f.StatusOr500(), serverErrorBody(f.StatusOr500()))
		return true
	}
	return false
}

// claimKey claims the request's Idempotency-Key, when it has one, for a
// fresh execution. It answers the request itself when the key is in flight
// (409), was first used with other parameters or on another endpoint (400,
// worded by mismatch), or has a saved answer (replayed, with f's network
// faults). Without a key the claim is nil, which Release and Finish ignore.
func (s *Server) claimKey(w http.ResponseWriter, r *http.Request, reqID, mismatch string, f fault.Fault) (*idemstore.Claim[savedResponse], bool) {
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key == "" {
		return nil, true
	}
	// The path is part of the fingerprint: a key is for one endpoint.
	// url.Values.Encode sorts by key: the fingerprint is order-independent.
	c, outcome, saved := s.keys.Begin(key, r.URL.Path+"?"+r.PostForm.Encode(), s.now())
	switch outcome {
	case idemstore.InFlight:
		s.writeError(w, r, reqID, http.StatusConflict, apiError{
			Type:    "invalid_request_error",
			Code:    "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this idempotent key (that probably means you submitted twice, and the other request is still going through): " + key + ". Please try again later.",
			DocURL:  "https://stripe.com/docs/error-codes/idempotency-key-in-use",
		})
		return nil, false
	case idemstore.Mismatch:
		s.writeError(w, r, reqID, http.StatusBadRequest, apiError{
			Type:    "idempotency_error",
			Message: mismatch + " Try using a key other than '" + key + "' if you meant to execute a different request.",
		})
		return nil, false
	case idemstore.Saved:
		s.mu.Lock()
		s.replays++
		s.mu.Unlock()
		s.replay(w, r, reqID, saved, f)
		return nil, false
	}
	return c, true
}

// finishKeyed saves resp, an answer act chose to save, under the claim and
// answers as the fault drawn for the request says: fault.ErrorAfter answers
// its status (a 500 saved in place of resp, as Stripe saves its 500s),
// fault.LoseResponse drops the connection, fault.Delay holds the answer
// back while the key stays in flight.
func (s *Server) finishKeyed(w http.ResponseWriter, r *http.Request, reqID string, f fault.Fault, claim *idemstore.Claim[savedResponse], resp savedResponse) {
	switch f.Kind {
	case fault.ErrorAfter:
		s.countFault(f.Kind)
		status := f.StatusOr500()
		errResp := savedResponse{status: status, body: serverErrorBody(status), requestID: reqID}
		if status == http.StatusInternalServerError {
			claim.Finish(errResp)
		} else {
			claim.Finish(resp)
		}
		s.write(w, r, reqID, errResp.status, errResp.body)
	case fault.LoseResponse:
		s.countFault(f.Kind)
		claim.Finish(resp)
		fault.DropConnection(w)
	case fault.Delay:
		s.countFault(f.Kind)
		sleep(r.Context(), f.Delay)
		claim.Finish(resp)
		s.write(w, r, reqID, resp.status, resp.body)
	default:
		claim.Finish(resp)
		s.write(w, r, reqID, resp.status, resp.body)
	}
}

// refusal is an answer that is not saved under the key.
func refusal(reqID string, status int, e apiError) (savedResponse, bool) {
	if e.RequestLogURL == "" {
		e.RequestLogURL = "https://dashboard.stripe.com/test/logs/" + reqID
	}
	return savedResponse{status: status, body: errorBody(e), requestID: reqID}, false
}

// success is a 200 answering with object, saved under the key.
func success(reqID string, object map[string]any) (savedResponse, bool) {
	body, _ := json.Marshal(object)
	return savedResponse{status: http.StatusOK, body: body, requestID: reqID}, true
}

// enumParam reads param, which must be empty or one of allowed, and
// refuses any other value in Stripe's words ("must be one of a or b",
// "must be one of a, b, or c").
func enumParam(form map[string][]string, param string, allowed []string) (string, *apiError) {
	v := formValue(form, param)
	if v != "" && !slices.Contains(allowed, v) {
		oneOf := strings.Join(allowed, " or ")
		if len(allowed) > 2 {
			oneOf = strings.Join(allowed[:len(allowed)-1], ", ") + ", or " + allowed[len(allowed)-1]
		}
		return "", invalid(param, "", "Invalid "+param+": must be one of "+oneOf)
	}
	return v, nil
}

// boolParam reads param, which must be "true" or "false" when given.
func boolParam(form map[string][]string, param string) (v, given bool, e *apiError) {
	s, given := formParam(form, param)
	if !given {
		return false, false, nil
	}
	switch s {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, true, invalid(param, "parameter_invalid_boolean", "Invalid boolean: "+s)
}

// metadataParams reads metadata[...] parameters as Stripe checks them.
func metadataParams(form map[string][]string) (map[string]string, *apiError) {
	md := map[string]string{}
	// In key order, so that of two bad keys the same one is named every
	// time (the form is a map).
	for _, k := range slices.Sorted(maps.Keys(form)) {
		vs := form[k]
		mk, ok := strings.CutPrefix(k, "metadata[")
		if !ok || !strings.HasSuffix(mk, "]") {
			continue
		}
		v := vs[len(vs)-1]
		mk = strings.TrimSuffix(mk, "]")
		switch {
		case mk == "" || strings.ContainsAny(mk, "[]"):
			return nil, invalid(k, "parameter_unknown", "Invalid metadata key: "+mk)
		case len(mk) > 40:
			return nil, invalid(k, "", "Metadata keys can be at most 40 characters long. Invalid key: "+mk)
		case len(v) > 500:
			return nil, invalid(k, "", "Metadata values can have up to 500 characters, but you passed in a value that is "+strconv.Itoa(len(v))+" characters.")
		}
		md[mk] = v
	}
	if len(md) > 50 {
		return nil, invalid("metadata", "", "Metadata can have up to 50 keys, but you passed in "+strconv.Itoa(len(md))+" keys.")
	}
	return md, nil
}

// onlyParams refuses a parameter outside known (or metadata[...], expand[...]).
func onlyParams(form map[string][]string, known ...string) *apiError {
	for _, k := range slices.Sorted(maps.Keys(form)) {
		if strings.HasPrefix(k, "metadata[") || strings.HasPrefix(k, "expand[") {
			continue
		}
		ok := false
		for _, kk := range known {
			if k == kk {
				ok = true
				break
			}
		}
		if !ok {
			return invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
		}
	}
	return nil
}

// formValue is the last value of parameter k, or "" when it is not given.
func formValue(form map[string][]string, k string) string {
	v, _ := formParam(form, k)
	return v
}

// formParam is formValue, and whether k was given at all.
func formParam(form map[string][]string, k string) (string, bool) {
	if vs := form[k]; len(vs) > 0 {
		return vs[len(vs)-1], true
	}
	return "", false
}

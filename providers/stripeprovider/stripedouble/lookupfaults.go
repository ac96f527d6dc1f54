package stripedouble

import (
	"net/http"
	"strconv"
	"time"

	"github.com/outboxkit/outbox/providers/fault"
)

// LookupFaults returns the injector the double's reads draw faults from:
// ErrorBefore (and ErrorAfter: a read has no effect) answers its Status as
// Stripe words it (400 and 404 resource_missing, as for an object of
// another account or mode; 401 an invalid key; 403 a restricted key; 5xx
// api_error), RateLimit a 429 with Retry-After when its RetryAfter is set
// and without one (Stripe-Should-Retry: false) when it is not, and
// LoseResponse and Delay as for writes.
func (s *Server) LookupFaults() *fault.Injector { return s.lookupFaults }

// lookupFault applies the next look-up fault to a read; it reports whether
// it answered the request.
func (s *Server) lookupFault(w http.ResponseWriter, r *http.Request, reqID string) bool {
	f := s.lookupFaults.Next()
	if f.Kind == fault.None || f.Kind == fault.Delay || f.Kind == fault.LoseResponse {
		return fault.ApplyToRead(w, r, f)
	}
	switch f.Kind {
	case fault.RateLimit:
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((f.RetryAfter+time.Second-1)/time.Second)))
		} else {
			w.Header().Set("Stripe-Should-Retry", "false")
		}
		s.writeError(w, r, reqID, http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
			Message: "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."})
		return true
	}
	status := f.StatusOr500()
	e := apiError{Type: "invalid_request_error", Message: http.StatusText(status)}
	switch {
	case status == http.StatusBadRequest || status == http.StatusNotFound:
		e.Code, e.Param = "resource_missing", "id"
		e.Message = "No such payment_intent: the object exists in another account or mode (a live key reading a test object, say)"
	case status == http.StatusUnauthorized:
		e.Message = "Invalid API Key provided"
	case status == http.StatusForbidden:
		e.Message = "The provided key does not have the required permissions for this endpoint."
	case status >= 500:
		e.Type, e.Message = "api_error", "An unknown error occurred"
	}
	s.writeError(w, r, reqID, status, e)
	return true
}

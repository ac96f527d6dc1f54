package stripedouble

import (
	"encoding/json"
	"net/http"
)

// ---- GET /v1/payment_intents/{id} ----

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	s.countRequest()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return
	}
	if s.lookupFault(w, r, reqID) {
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	pi, ok := s.byID[id]
	var wire map[string]any
	if ok {
		wire = pi.wire()
	}
	s.mu.Unlock()
	if !ok {
		s.writeError(w, r, reqID, http.StatusNotFound, apiError{
			Type:    "invalid_request_error",
			Code:    "resource_missing",
			Param:   "intent",
			Message: "No such payment_intent: '" + id + "'",
			DocURL:  "https://stripe.com/docs/error-codes/resource-missing",
		})
		return
	}
	body, _ := json.Marshal(wire)
	s.write(w, r, reqID, http.StatusOK, body)
}

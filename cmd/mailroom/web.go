package main

import "net/http"

// buildWeb builds the HTTP handler over the app's parts.
func (a *app) buildWeb() error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
	a.handler = mux
	return nil
}

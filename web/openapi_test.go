package web

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gin-gonic/gin"
	"github.com/google/go-cmp/cmp"

	"mailroom/assets"
	"mailroom/queue/gmail"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// apiDoc is the embedded OpenAPI description, loaded and validated once,
// with a router that finds each /api/v1 request's operation.
var apiDoc = sync.OnceValues(func() (*apiSpec, error) {
	raw, err := openAPIJSON(assets.OpenAPI())
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	// The router matches full URLs: the test requests go to example.com.
	doc.Servers = openapi3.Servers{{URL: "http://example.com/api/v1"}}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &apiSpec{doc: doc, router: r}, nil
})

type apiSpec struct {
	doc    *openapi3.T
	router routers.Router
}

// templated finds r's operation among the templated paths only (a
// literal segment of the request taken as a parameter's value).
func (s *apiSpec) templated(r *http.Request) (*routers.Route, map[string]string, error) {
	got := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1"), "/")
	for path, item := range s.doc.Paths.Map() {
		op := item.GetOperation(r.Method)
		want := strings.Split(path, "/")
		if op == nil || len(want) != len(got) {
			continue
		}
		params := map[string]string{}
		for i, seg := range want {
			if name, ok := strings.CutPrefix(seg, "{"); ok {
				params[strings.TrimSuffix(name, "}")] = got[i]
			} else if seg != got[i] {
				params = nil
				break
			}
		}
		if params != nil {
			return &routers.Route{Spec: s.doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params, nil
		}
	}
	return nil, nil, routers.ErrPathNotFound
}

// checkAPIResponse validates the answer w to req (an /api/v1 request)
// against the OpenAPI description: its operation must be documented, and
// its status, headers and body must be the ones documented for it.
func checkAPIResponse(t testing.TB, req *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	spec, err := apiDoc()
	if err != nil {
		t.Fatalf("OpenAPI description: %v", err)
	}
	r := req.Clone(context.Background())
	r.URL.Scheme, r.URL.Host, r.Host = "http", "example.com", "example.com"
	r.Body = http.NoBody
	route, params, err := spec.router.FindRoute(r)
	if errors.Is(err, routers.ErrMethodNotAllowed) {
		// gin routes GET /deadletters/redrive to /deadletters/{id}; the
		// router stops at the literal path that has only POST.
		route, params, err = spec.templated(r)
	}
	if err != nil {
		// An unrouted path answers 404 (or 405) and is not an operation.
		if w.Code == http.StatusNotFound || w.Code == http.StatusMethodNotAllowed {
			return
		}
		t.Errorf("%s %s answered %d but is not in the OpenAPI description: %v", req.Method, req.URL.Path, w.Code, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: w.Code,
		Header: w.Header(),
		Body:   io.NopCloser(bytes.NewReader(w.Body.Bytes())),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s: the answer %d does not match the OpenAPI description: %v\nbody: %.500s", req.Method, req.URL.Path, w.Code, err, w.Body.String())
	}
}

// allRoutesServer is a web handler with every pipeline present, so that
// every route of routes.go is registered (none is called).
func allRoutesServer(t *testing.T) *gin.Engine {
	t.Helper()
	e := newEnv(t, envOptions{queue: true, deps: func(d *Deps) {
		d.Gmail = (*gmail.Pipeline)(nil)
		d.Rules = (*rules.Pipeline)(nil)
		d.Forms = (*sheets.Pipeline)(nil)
		d.DebugTasks = debugTasksStub{}
		d.Connect = (*accounts.Service)(nil)
		d.Webhooks = (*webhooks.Pipeline)(nil)
	}})
	return e.h.(*gin.Engine)
}

type debugTasksStub struct{}

func (debugTasksStub) EnqueueDebug(int, string, int) (int, error) { return 0, nil }

var ginParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// TestOpenAPICoversEveryRoute: every /api/v1 route of the routes table is
// in the OpenAPI description with its method, and the description has no
// operation that is not routed.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	spec, err := apiDoc()
	if err != nil {
		t.Fatalf("OpenAPI description: %v", err)
	}
	if !spec.doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1", spec.doc.OpenAPI)
	}
	routed := map[string]bool{}
	for _, r := range allRoutesServer(t).Routes() {
		p, ok := strings.CutPrefix(r.Path, "/api/v1")
		if !ok {
			continue
		}
		routed[r.Method+" "+ginParam.ReplaceAllString(p, "{$1}")] = true
	}
	documented := map[string]bool{}
	for path, item := range spec.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	var missing, extra []string
	for k := range routed {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !routed[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from assets/api/openapi.yaml:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("documented operations that are not routed:\n  %s", strings.Join(extra, "\n  "))
	}
	if len(routed) < 30 {
		t.Errorf("only %d /api/v1 routes found; the walk is broken", len(routed))
	}
	// Every operation documents the contract's error shape for 401.
	for path, item := range spec.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if path == "/openapi.json" {
				continue
			}
			if op.Responses.Status(http.StatusUnauthorized) == nil {
				t.Errorf("%s %s: no 401 answer documented", method, path)
			}
		}
	}
}

// TestOpenAPIServed: the description is served as JSON without a token and
// is the embedded document.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	w := request(t, e.h, http.MethodGet, "/api/v1/openapi.json", nil, nil)
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(w.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Paths.Find("/users/{uid}/connect") == nil {
		t.Fatalf("served document: openapi %q, connect path %v", doc.OpenAPI, doc.Paths.Find("/users/{uid}/connect") != nil)
	}
	if !slices.ContainsFunc(doc.Security, func(r openapi3.SecurityRequirement) bool { _, ok := r["bearer"]; return ok }) {
		t.Error("the document does not require the bearer token by default")
	}
}

// TestOpenAPIEventTypes: the Event schema's type enum is every event type
// the store emits (the webhook types and the feed's types filter accept
// exactly those).
func TestOpenAPIEventTypes(t *testing.T) {
	t.Parallel()
	spec, err := apiDoc()
	if err != nil {
		t.Fatal(err)
	}
	ref := spec.doc.Components.Schemas["Event"]
	if ref == nil || ref.Value.Properties["type"] == nil {
		t.Fatal("no Event schema with a type")
	}
	var got []string
	for _, v := range ref.Value.Properties["type"].Value.Enum {
		s, _ := v.(string)
		got = append(got, s)
	}
	if diff := cmp.Diff(store.EventTypes(), got); diff != "" {
		t.Errorf("Event.type enum (-store.EventTypes +openapi.yaml):\n%s", diff)
	}
}

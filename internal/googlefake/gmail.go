package googlefake

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	gmailapi "google.golang.org/api/gmail/v1"
)

const (
	defaultPageSize   = 100
	maxPageSize       = 500
	maxBatchModifyIDs = 1000
)

// gmailMethods are the Gmail methods the emulator serves.
func gmailMethods() []string {
	return []string{
		MethodGetProfile, MethodWatch, MethodStop, MethodMessagesList, MethodMessagesGet,
		MethodMessagesModify, MethodMessagesBatchModify, MethodMessagesTrash, MethodMessagesUntrash,
		MethodMessagesDelete, MethodHistoryList, MethodLabelsList, MethodLabelsGet, MethodLabelsCreate,
		MethodThreadsGet,
	}
}

// MethodThreadsGet is users.threads.get, for Calls, InjectFault and the
// counters (beside the other Method constants in faults.go).
const MethodThreadsGet = "gmail.threads.get"

// newEndpoint returns the endpoint of a Gmail method; its quota cost is
// the price list's (gmailPrices).
func (g *Gmail) newEndpoint(method string) *endpoint {
	ep := &endpoint{method: method, auth: true, gmail: true}
	switch method {
	case MethodGetProfile:
		ep.handle = g.getProfile
	case MethodWatch:
		ep.handle = g.watch
	case MethodStop:
		ep.handle = g.stop
	case MethodMessagesList:
		ep.handle = g.listMessages
	case MethodMessagesGet:
		ep.handle = g.getMessage
	case MethodMessagesModify:
		ep.handle = g.modifyMessage
	case MethodMessagesBatchModify:
		ep.handle = g.batchModify
	case MethodMessagesTrash:
		ep.handle = g.trashMessage
	case MethodMessagesUntrash:
		ep.handle = g.untrashMessage
	case MethodMessagesDelete:
		ep.handle = g.deleteMessage
	case MethodHistoryList:
		ep.handle = g.listHistory
	case MethodLabelsList:
		ep.handle = g.listLabels
	case MethodLabelsGet:
		ep.handle = g.getLabel
	case MethodLabelsCreate:
		ep.handle = g.createLabel
	case MethodThreadsGet:
		ep.handle = g.getThread
	}
	return ep
}

// route maps gmail/v1/users/{userId}/... to a method.
func (g *Gmail) route(r *http.Request) (*endpoint, map[string]string, error) {
	seg := splitPath(r, "/gmail/v1/users/")
	if len(seg) < 2 || seg[0] == "" {
		return nil, nil, errNotFound("")
	}
	params := map[string]string{"userId": seg[0]}
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	var method string
	known := true
	switch rest := seg[1:]; {
	case len(rest) == 1 && rest[0] == "profile":
		method = pick(get, MethodGetProfile)
	case len(rest) == 1 && rest[0] == "watch":
		method = pick(post, MethodWatch)
	case len(rest) == 1 && rest[0] == "stop":
		method = pick(post, MethodStop)
	case len(rest) == 1 && rest[0] == "history":
		method = pick(get, MethodHistoryList)
	case len(rest) == 1 && rest[0] == "messages":
		method = pick(get, MethodMessagesList)
	case len(rest) == 2 && rest[0] == "messages" && rest[1] == "batchModify":
		method = pick(post, MethodMessagesBatchModify)
	case len(rest) == 2 && rest[0] == "messages":
		params["id"] = rest[1]
		switch r.Method {
		case http.MethodGet:
			method = MethodMessagesGet
		case http.MethodDelete:
			method = MethodMessagesDelete
		}
	case len(rest) == 3 && rest[0] == "messages":
		params["id"] = rest[1]
		switch rest[2] {
		case "modify":
			method = pick(post, MethodMessagesModify)
		case "trash":
			method = pick(post, MethodMessagesTrash)
		case "untrash":
			method = pick(post, MethodMessagesUntrash)
		default:
			known = false
		}
	case len(rest) == 1 && rest[0] == "labels":
		switch r.Method {
		case http.MethodGet:
			method = MethodLabelsList
		case http.MethodPost:
			method = MethodLabelsCreate
		}
	case len(rest) == 2 && rest[0] == "labels":
		params["id"] = rest[1]
		method = pick(get, MethodLabelsGet)
	case len(rest) == 2 && rest[0] == "threads":
		params["id"] = rest[1]
		method = pick(get, MethodThreadsGet)
	default:
		known = false
	}
	if !known {
		return nil, nil, errNotFound("")
	}
	if method == "" {
		return nil, nil, errMethod()
	}
	return g.eps[method], params, nil
}

func pick(ok bool, method string) string {
	if ok {
		return method
	}
	return ""
}

// mailboxOf checks the call's userId ("me" or the token's own address) and
// returns the mailbox.
func (g *Gmail) mailboxOf(c *call) (*mailbox, error) {
	u := c.params["userId"]
	if u != "me" && !sameEmail(u, c.account) {
		return nil, errForbidden("Delegation denied for " + c.account)
	}
	b, err := g.box(c.account)
	if err != nil {
		return nil, errNotFound("Mail service not enabled")
	}
	return b, nil
}

// apiErr turns a Go-API error into the answer Gmail gives.
func apiErr(err error) error {
	var ae *apiError
	var le labelError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &le):
		return errInvalid("Invalid label: " + le.id)
	case errors.Is(err, ErrUnknownMessage), errors.Is(err, ErrUnknownThread),
		errors.Is(err, ErrUnknownAccount), errors.Is(err, ErrUnknownSpreadsheet):
		return errNotFound("")
	case errors.Is(err, ErrLabelConflict):
		return errInvalid("Cannot both add and remove the same label.")
	case errors.Is(err, ErrLabelExists):
		return &apiError{Code: 409, Status: "ABORTED", Reason: "duplicate", Message: "Label name exists or conflicts"}
	}
	return err
}

func (g *Gmail) getProfile(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return &gmailapi.Profile{
		EmailAddress: b.email, HistoryId: b.historyID,
		MessagesTotal: int64(len(b.msgs)), ThreadsTotal: int64(len(b.threads)),
	}, nil
}

// pageSize reads maxResults with Gmail's default and cap.
func pageSize(c *call) (int, error) {
	v := c.query.Get("maxResults")
	if v == "" {
		return defaultPageSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errInvalid("Invalid value for maxResults: " + v)
	}
	if n == 0 {
		return defaultPageSize, nil
	}
	return min(n, maxPageSize), nil
}

func boolParam(c *call, name string) bool {
	v, _ := strconv.ParseBool(c.query.Get(name))
	return v
}

func (g *Gmail) listMessages(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(c)
	if err != nil {
		return nil, err
	}
	labels := c.query["labelIds"]
	spamTrash := boolParam(c, "includeSpamTrash")
	b.mu.Lock()
	defer b.mu.Unlock()
	end := len(b.order) // walk b.order[:end] from the newest down
	if tok := c.query.Get("pageToken"); tok != "" {
		ms, seq, ok := parseListToken(tok)
		if !ok {
			return nil, errInvalid("Invalid pageToken")
		}
		date := time.UnixMilli(ms)
		end = sort.Search(len(b.order), func(i int) bool { return !b.order[i].less(date, seq) })
	}
	resp := &gmailapi.ListMessagesResponse{}
	i := end - 1
	for ; i >= 0 && len(resp.Messages) < size; i-- {
		m := b.order[i]
		if listMatch(m, labels, spamTrash) {
			resp.Messages = append(resp.Messages, &gmailapi.Message{Id: m.id, ThreadId: m.threadID})
		}
	}
	more := false
	for j := i; j >= 0; j-- {
		if listMatch(b.order[j], labels, spamTrash) {
			more = true
			break
		}
	}
	resp.ResultSizeEstimate = int64(len(resp.Messages))
	if more {
		last := b.order[i+1]
		resp.NextPageToken = fmt.Sprintf("%d.%d", last.date.UnixMilli(), last.seq)
		resp.ResultSizeEstimate = int64(len(b.order))
	}
	return resp, nil
}

func parseListToken(tok string) (ms int64, seq uint64, ok bool) {
	a, b, found := strings.Cut(tok, ".")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

func listMatch(m *message, labels []string, spamTrash bool) bool {
	if !spamTrash && (slices.Contains(m.labels, LabelSpam) || slices.Contains(m.labels, LabelTrash)) {
		return false
	}
	for _, l := range labels {
		if !slices.Contains(m.labels, l) {
			return false
		}
	}
	return true
}

// headers returns the message's RFC 822 headers in order.
func (m *message) headers() [][2]string {
	h := [][2]string{
		{"Date", m.date.Format(time.RFC1123Z)},
		{"Message-ID", "<" + m.id + "@mail.googlefake.example>"},
		{"From", m.from},
		{"To", m.to},
	}
	if m.cc != "" {
		h = append(h, [2]string{"Cc", m.cc})
	}
	return append(h,
		[2]string{"Subject", m.subject},
		[2]string{"MIME-Version", "1.0"},
		[2]string{"Content-Type", `text/plain; charset="UTF-8"`},
	)
}

func (m *message) raw() []byte {
	var sb strings.Builder
	for _, h := range m.headers() {
		sb.WriteString(h[0])
		sb.WriteString(": ")
		sb.WriteString(h[1])
		sb.WriteString("\r\n")
	}
	sb.WriteString("\r\n")
	sb.WriteString(strings.ReplaceAll(m.body, "\n", "\r\n"))
	return []byte(sb.String())
}

// render encodes a message in one of Gmail's formats.
func (m *message) render(format string, metadataHeaders []string) (*gmailapi.Message, error) {
	raw := m.raw()
	out := &gmailapi.Message{
		Id: m.id, ThreadId: m.threadID, LabelIds: slices.Clone(m.labels), Snippet: m.snip(),
		HistoryId: m.historyID, InternalDate: m.date.UnixMilli(), SizeEstimate: int64(len(raw)),
	}
	switch format {
	case "minimal":
	case "raw":
		out.Raw = base64.URLEncoding.EncodeToString(raw)
	case "metadata", "full", "":
		part := &gmailapi.MessagePart{MimeType: "text/plain"}
		for _, h := range m.headers() {
			if format == "metadata" && len(metadataHeaders) > 0 &&
				!slices.ContainsFunc(metadataHeaders, func(w string) bool { return strings.EqualFold(w, h[0]) }) {
				continue
			}
			part.Headers = append(part.Headers, &gmailapi.MessagePartHeader{Name: h[0], Value: h[1]})
		}
		if format != "metadata" {
			part.Body = &gmailapi.MessagePartBody{
				Size: int64(len(m.body)),
				Data: base64.URLEncoding.EncodeToString([]byte(m.body)),
			}
		}
		out.Payload = part
	default:
		return nil, errInvalid("Invalid value for format: " + format)
	}
	return out, nil
}

func (g *Gmail) getMessage(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.msgs[c.params["id"]]
	if m == nil {
		return nil, errNotFound("")
	}
	return m.render(c.query.Get("format"), c.query["metadataHeaders"])
}

// getThread is users.threads.get
// (developers.google.com/workspace/gmail/api/reference/rest/v1/users.threads/get):
// the thread's messages, each rendered as messages.get renders it in the
// format asked for. That page's Format enum has full (the default),
// metadata and minimal only, so raw, which messages.get takes, is a 400
// here; metadataHeaders[] applies with format metadata alone. The Thread
// resource (reference/rest/v1/users.threads) carries id, snippet ("a short
// part of the message text": the newest message's here; mailroom does not
// read it), historyId ("the ID of the last history record that modified
// this thread": the highest of its messages') and messages[]. The
// reference does not say in which order the messages come: the emulator
// answers oldest first, and mailroom does not rely on any order. A thread
// id the mailbox does not have (never had, or every message of it
// deleted) is 404, as messages.get answers an unknown message (the
// reference's errors are those of every method: guides/handle-errors).
func (g *Gmail) getThread(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	format := c.query.Get("format")
	switch format {
	case "", "full", "metadata", "minimal":
	default:
		return nil, errInvalid("Invalid value for format: " + format)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.threads[c.params["id"]]
	if len(msgs) == 0 {
		return nil, errNotFound("")
	}
	out := &gmailapi.Thread{Id: c.params["id"]}
	for _, m := range msgs {
		r, err := m.render(format, c.query["metadataHeaders"])
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, r)
		out.HistoryId = max(out.HistoryId, m.historyID)
	}
	out.Snippet = msgs[len(msgs)-1].snip()
	return out, nil
}

// mutateCall runs fn on the call's mailbox through Gmail.mutate (history,
// push), answering Gmail's errors.
func (g *Gmail) mutateCall(c *call, fn func(b *mailbox, now time.Time) error) error {
	if _, err := g.mailboxOf(c); err != nil {
		return err
	}
	return apiErr(g.mutate(c.account, fn))
}

// minimalOf returns the message as modify, trash and untrash answer it.
func minimalOf(b *mailbox, id string) *gmailapi.Message {
	m := b.msgs[id]
	return &gmailapi.Message{Id: m.id, ThreadId: m.threadID, LabelIds: slices.Clone(m.labels)}
}

func (g *Gmail) modifyMessage(c *call) (any, error) {
	var req gmailapi.ModifyMessageRequest
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	var out *gmailapi.Message
	err := g.mutateCall(c, func(b *mailbox, now time.Time) error {
		if err := b.modify(g.s, now, c.params["id"], req.AddLabelIds, req.RemoveLabelIds); err != nil {
			return err
		}
		out = minimalOf(b, c.params["id"])
		return nil
	})
	return out, err
}

func (g *Gmail) labelChange(c *call, add, remove []string) (any, error) {
	var out *gmailapi.Message
	err := g.mutateCall(c, func(b *mailbox, now time.Time) error {
		if err := b.modify(g.s, now, c.params["id"], add, remove); err != nil {
			return err
		}
		out = minimalOf(b, c.params["id"])
		return nil
	})
	return out, err
}

func (g *Gmail) trashMessage(c *call) (any, error) {
	return g.labelChange(c, []string{LabelTrash}, nil)
}

func (g *Gmail) untrashMessage(c *call) (any, error) {
	return g.labelChange(c, nil, []string{LabelTrash})
}

func (g *Gmail) deleteMessage(c *call) (any, error) {
	err := g.mutateCall(c, func(b *mailbox, now time.Time) error {
		return b.deleteMessage(g.s, now, c.params["id"])
	})
	return noContent{}, err
}

func (g *Gmail) batchModify(c *call) (any, error) {
	var req gmailapi.BatchModifyMessagesRequest
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	if len(req.Ids) == 0 {
		return nil, errInvalid("No message ids specified.")
	}
	if len(req.Ids) > maxBatchModifyIDs {
		return nil, errInvalid(fmt.Sprintf("Too many ids specified: %d. Maximum is %d.", len(req.Ids), maxBatchModifyIDs))
	}
	err := g.mutateCall(c, func(b *mailbox, now time.Time) error {
		for _, l := range slices.Concat(req.AddLabelIds, req.RemoveLabelIds) {
			if !b.validLabel(l) {
				return labelError{l}
			}
		}
		for _, id := range req.Ids {
			err := b.modify(g.s, now, id, req.AddLabelIds, req.RemoveLabelIds)
			if err != nil && !errors.Is(err, ErrUnknownMessage) {
				return err
			}
		}
		return nil
	})
	return noContent{}, err
}

// historyFilter selects record parts by the historyTypes and labelId
// parameters of history.list.
type historyFilter struct {
	added, deleted, labelAdded, labelRemoved bool
	label                                    string
}

func parseHistoryFilter(c *call) (historyFilter, error) {
	f := historyFilter{label: c.query.Get("labelId")}
	types := c.query["historyTypes"]
	if len(types) == 0 {
		f.added, f.deleted, f.labelAdded, f.labelRemoved = true, true, true, true
	}
	for _, t := range types {
		switch t {
		case "messageAdded":
			f.added = true
		case "messageDeleted":
			f.deleted = true
		case "labelAdded":
			f.labelAdded = true
		case "labelRemoved":
			f.labelRemoved = true
		default:
			return f, errInvalid("Invalid value for historyTypes: " + t)
		}
	}
	return f, nil
}

// render returns the record as history.list shows it through f, or nil when
// f filters all of it out.
func (r *record) render(f historyFilter) *gmailapi.History {
	if f.label != "" && !slices.Contains(r.labels, f.label) &&
		!slices.Contains(r.added, f.label) && !slices.Contains(r.removed, f.label) {
		return nil
	}
	msg := func(withLabels bool) *gmailapi.Message {
		m := &gmailapi.Message{Id: r.msgID, ThreadId: r.threadID}
		if withLabels {
			m.LabelIds = slices.Clone(r.labels)
		}
		return m
	}
	h := &gmailapi.History{Id: r.id}
	switch r.kind {
	case recAdded:
		if f.added {
			h.MessagesAdded = []*gmailapi.HistoryMessageAdded{{Message: msg(true)}}
		}
	case recDeleted:
		if f.deleted {
			h.MessagesDeleted = []*gmailapi.HistoryMessageDeleted{{Message: msg(false)}}
		}
	case recLabels:
		if f.labelAdded && len(r.added) > 0 {
			h.LabelsAdded = []*gmailapi.HistoryLabelAdded{{Message: msg(true), LabelIds: slices.Clone(r.added)}}
		}
		if f.labelRemoved && len(r.removed) > 0 {
			h.LabelsRemoved = []*gmailapi.HistoryLabelRemoved{{Message: msg(true), LabelIds: slices.Clone(r.removed)}}
		}
	}
	if h.MessagesAdded == nil && h.MessagesDeleted == nil && h.LabelsAdded == nil && h.LabelsRemoved == nil {
		return nil
	}
	h.Messages = []*gmailapi.Message{msg(false)}
	return h
}

func (g *Gmail) listHistory(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	startParam := c.query.Get("startHistoryId")
	if startParam == "" {
		return nil, errInvalid("Missing required field: startHistoryId")
	}
	start, err := strconv.ParseUint(startParam, 10, 64)
	if err != nil {
		return nil, errInvalid("Invalid startHistoryId: " + startParam)
	}
	size, err := pageSize(c)
	if err != nil {
		return nil, err
	}
	f, err := parseHistoryFilter(c)
	if err != nil {
		return nil, err
	}
	after := start
	if tok := c.query.Get("pageToken"); tok != "" {
		n, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, errInvalid("Invalid pageToken")
		}
		after = max(after, n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(g.s.now(), &g.s.opts)
	if start < b.floor || after < b.floor {
		return nil, errNotFound("Requested entity was not found.")
	}
	visible, hid := b.visibleHistory(g.s.now(), g.s.opts.HistoryLag)
	resp := &gmailapi.ListHistoryResponse{HistoryId: hid}
	i := sort.Search(visible, func(i int) bool { return b.history[i].id > after })
	for ; i < visible; i++ {
		h := b.history[i].render(f)
		if h == nil {
			continue
		}
		if len(resp.History) == size {
			resp.NextPageToken = strconv.FormatUint(resp.History[size-1].Id, 10)
			break
		}
		resp.History = append(resp.History, h)
	}
	return resp, nil
}

// visibleHistory returns how many of the history records history.list
// shows at now, with lag hiding the youngest (Options.HistoryLag), and the
// historyId it answers: the mailbox's, or just below the first hidden
// record.
func (b *mailbox) visibleHistory(now time.Time, lag time.Duration) (n int, historyID uint64) {
	n = len(b.history)
	if lag <= 0 {
		return n, b.historyID
	}
	cutoff := now.Add(-lag)
	n = sort.Search(len(b.history), func(i int) bool { return b.history[i].at.After(cutoff) })
	if n == len(b.history) {
		return n, b.historyID
	}
	return n, b.history[n].id - 1
}

func labelOf(l *userLabel) *gmailapi.Label {
	return &gmailapi.Label{
		Id: l.id, Name: l.name, Type: "user",
		LabelListVisibility: l.listVisibility, MessageListVisibility: l.msgVisibility,
	}
}

func systemLabelOf(id string) *gmailapi.Label {
	return &gmailapi.Label{Id: id, Name: id, Type: "system"}
}

func (g *Gmail) listLabels(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	resp := &gmailapi.ListLabelsResponse{}
	for _, id := range SystemLabels() {
		resp.Labels = append(resp.Labels, systemLabelOf(id))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	user := make([]*userLabel, 0, len(b.labels))
	for _, l := range b.labels {
		user = append(user, l)
	}
	sort.Slice(user, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(user[i].id, "Label_"))
		z, _ := strconv.Atoi(strings.TrimPrefix(user[j].id, "Label_"))
		return a < z
	})
	for _, l := range user {
		resp.Labels = append(resp.Labels, labelOf(l))
	}
	return resp, nil
}

func (g *Gmail) getLabel(c *call) (any, error) {
	b, err := g.mailboxOf(c)
	if err != nil {
		return nil, err
	}
	id := c.params["id"]
	b.mu.Lock()
	defer b.mu.Unlock()
	var out *gmailapi.Label
	if isSystemLabel(id) {
		out = systemLabelOf(id)
	} else if l := b.labels[id]; l != nil {
		out = labelOf(l)
	} else {
		return nil, errNotFound("")
	}
	for _, m := range b.order {
		if slices.Contains(m.labels, id) {
			out.MessagesTotal++
			if slices.Contains(m.labels, LabelUnread) {
				out.MessagesUnread++
			}
		}
	}
	return out, nil
}

func (g *Gmail) createLabel(c *call) (any, error) {
	var req gmailapi.Label
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Name) == "" {
		return nil, errInvalid("Invalid label name")
	}
	var out *gmailapi.Label
	err := g.mutateCall(c, func(b *mailbox, _ time.Time) error {
		l, err := b.createLabel(req.Name, req.LabelListVisibility, req.MessageListVisibility)
		if err == nil {
			out = labelOf(l)
		}
		return err
	})
	return out, err
}

func (g *Gmail) watch(c *call) (any, error) {
	var req gmailapi.WatchRequest
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(req.TopicName, "projects/") || !strings.Contains(req.TopicName, "/topics/") {
		return nil, errInvalid("Invalid topicName does not match projects/SOME-PROJECT/topics/SOME-TOPIC")
	}
	behavior := strings.ToLower(req.LabelFilterBehavior)
	if behavior == "" {
		behavior = strings.ToLower(req.LabelFilterAction)
	}
	if behavior == "" {
		behavior = "include"
	}
	if behavior != "include" && behavior != "exclude" {
		return nil, errInvalid("Invalid labelFilterBehavior: " + req.LabelFilterBehavior)
	}
	var out *gmailapi.WatchResponse
	err := g.mutateCall(c, func(b *mailbox, now time.Time) error {
		for _, l := range req.LabelIds {
			if !b.validLabel(l) {
				return labelError{l}
			}
		}
		exp := now.Add(g.s.opts.WatchTTL)
		b.watch = &Watch{
			Topic: req.TopicName, LabelIDs: slices.Clone(req.LabelIds), Behavior: behavior,
			Expiration: exp, HistoryID: b.historyID,
		}
		out = &gmailapi.WatchResponse{HistoryId: b.historyID, Expiration: exp.UnixMilli()}
		return nil
	})
	return out, err
}

func (g *Gmail) stop(c *call) (any, error) {
	err := g.mutateCall(c, func(b *mailbox, _ time.Time) error {
		b.watch = nil
		return nil
	})
	return noContent{}, err
}

package googlefake

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Generator makes believable mail for one mailbox, deterministically from a
// seed: people and newsletters writing in threads, some replies sent by the
// owner, a mix of read, unread, starred, important and a little spam. It is
// not safe for concurrent use.
type Generator struct {
	rng     *rand.Rand
	w       words
	at      time.Time // date of the last message; zero: dates are "now"
	threads []*genThread
	count   int
}

type genThread struct {
	id      string
	subject string
	other   genPerson
	left    int // replies still to come
}

type genPerson struct{ name, email string }

// NewGenerator returns a generator seeded with seed. With a non-zero start,
// message dates run from start in gaps of 1 to 19 minutes (but never past
// the server clock); with a zero start every message is dated "now", for live
// traffic.
func NewGenerator(seed uint64, start time.Time) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)), w: newWords(), at: start}
}

// Generate adds n generated messages to the mailbox of email, dated over
// the last n×10 minutes, and returns their ids in order. The same seed gives
// the same mail.
func (g *Gmail) Generate(email string, n int, seed uint64) ([]string, error) {
	start := g.s.now().Add(-time.Duration(n) * 10 * time.Minute)
	return NewGenerator(seed, start).Add(g, email, n)
}

// Add adds the next n messages to the mailbox of email and returns their ids
// in order.
func (gen *Generator) Add(g *Gmail, email string, n int) ([]string, error) {
	owner := strings.ToLower(email)
	ownerAddr := fmt.Sprintf("%s <%s>", nameOf(owner), owner) // shared by every message
	ids := make([]string, 0, n)
	for range n {
		m, th := gen.next(owner, ownerAddr)
		if !gen.at.IsZero() {
			m.Date = minTime(gen.at, g.s.now())
		}
		id, err := g.AddMessage(email, m)
		if errors.Is(err, ErrUnknownThread) {
			// The thread was deleted meanwhile: start a new one.
			gen.drop(th)
			m.ThreadID, th = "", nil
			id, err = g.AddMessage(email, m)
		}
		if err != nil {
			return ids, fmt.Errorf("googlefake: generate: %w", err)
		}
		if th != nil && th.id == "" {
			th.id = id
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func minTime(a, b time.Time) time.Time {
	if a.After(b) {
		return b
	}
	return a
}

func (gen *Generator) drop(th *genThread) {
	for i, t := range gen.threads {
		if t == th {
			gen.threads = append(gen.threads[:i], gen.threads[i+1:]...)
			return
		}
	}
}

func (gen *Generator) pick(list []string) string { return list[gen.rng.IntN(len(list))] }

func (gen *Generator) chance(p float64) bool { return gen.rng.Float64() < p }

// next returns the next message and the thread it belongs to (nil for a
// newsletter, which never gets replies).
func (gen *Generator) next(owner, ownerAddr string) (Message, *genThread) {
	gen.count++
	if !gen.at.IsZero() {
		gen.at = gen.at.Add(time.Duration(1+gen.rng.IntN(19)) * time.Minute)
	}
	ownerName := nameOf(owner)
	// A reply in an open thread.
	if len(gen.threads) > 0 && gen.chance(0.4) {
		i := gen.rng.IntN(len(gen.threads))
		th := gen.threads[i]
		th.left--
		if th.left <= 0 {
			gen.threads = append(gen.threads[:i], gen.threads[i+1:]...)
		}
		m := Message{ThreadID: th.id, Subject: "Re: " + th.subject}
		if gen.chance(0.3) {
			// The owner answers: a sent message.
			m.From = ownerAddr
			m.To = fmt.Sprintf("%s <%s>", th.other.name, th.other.email)
			m.LabelIDs = []string{LabelSent}
			m.Body = gen.body(th.other.name, ownerName)
		} else {
			m.From = fmt.Sprintf("%s <%s>", th.other.name, th.other.email)
			m.To = ownerAddr
			m.LabelIDs = gen.inboxLabels(false)
			m.Body = gen.body(ownerName, th.other.name)
		}
		return m, th
	}
	// A newsletter or notification.
	if gen.chance(0.25) {
		sender := gen.pick(gen.w.newsletters)
		m := Message{
			From:    sender,
			To:      owner,
			Subject: strings.ReplaceAll(gen.pick(gen.w.newsletterSubjects), "{n}", fmt.Sprint(1000+gen.rng.IntN(9000))),
			Body:    gen.pick(gen.w.newsletterBodies),
		}
		m.LabelIDs = gen.inboxLabels(true)
		return m, nil
	}
	// A new conversation.
	first, last := gen.pick(gen.w.firstNames), gen.pick(gen.w.lastNames)
	p := genPerson{
		name:  first + " " + last,
		email: strings.ToLower(first+"."+last) + "@" + gen.pick(gen.w.domains),
	}
	subject := strings.ReplaceAll(gen.pick(gen.w.subjects), "{topic}", gen.pick(gen.w.topics))
	subject = strings.ReplaceAll(subject, "{n}", fmt.Sprint(1000+gen.rng.IntN(9000)))
	th := &genThread{subject: subject, other: p, left: gen.rng.IntN(5)}
	if th.left > 0 {
		gen.threads = append(gen.threads, th)
		if len(gen.threads) > 50 {
			gen.threads = gen.threads[1:]
		}
	}
	m := Message{
		From:    fmt.Sprintf("%s <%s>", p.name, p.email),
		To:      ownerAddr,
		Subject: subject,
		Body:    gen.body(ownerName, p.name),
	}
	if gen.chance(0.15) {
		m.Cc = gen.pick(gen.w.cc)
	}
	m.LabelIDs = gen.inboxLabels(false)
	return m, th
}

// inboxLabels picks the labels of a received message.
func (gen *Generator) inboxLabels(newsletter bool) []string {
	if gen.chance(0.02) {
		return []string{LabelSpam, LabelUnread}
	}
	labels := []string{LabelInbox}
	if gen.chance(0.4) {
		labels = append(labels, LabelUnread)
	}
	if newsletter {
		return append(labels, gen.pick([]string{LabelCategoryUpdates, LabelCategoryPromotions, LabelCategorySocial}))
	}
	labels = append(labels, LabelCategoryPersonal)
	if gen.chance(0.06) {
		labels = append(labels, LabelStarred)
	}
	if gen.chance(0.2) {
		labels = append(labels, LabelImportant)
	}
	return labels
}

func (gen *Generator) body(to, from string) string {
	first := strings.Fields(to)
	greet := "Hi"
	if len(first) > 0 {
		greet = gen.pick(gen.w.greetings) + " " + first[0]
	}
	var sb strings.Builder
	sb.WriteString(greet)
	sb.WriteString(",\n\n")
	for i, n := 0, 1+gen.rng.IntN(3); i < n; i++ {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strings.ReplaceAll(gen.pick(gen.w.sentences), "{topic}", gen.pick(gen.w.topics)))
	}
	sb.WriteString("\n\n")
	sb.WriteString(gen.pick(gen.w.signoffs))
	sb.WriteString(",\n")
	sb.WriteString(strings.Fields(from + " x")[0])
	sb.WriteString("\n")
	return sb.String()
}

// nameOf turns "ann.lee@example.com" into "Ann Lee".
func nameOf(email string) string {
	local, _, _ := strings.Cut(email, "@")
	parts := strings.FieldsFunc(local, func(r rune) bool { return r == '.' || r == '_' || r == '-' || r == '+' })
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	if len(parts) == 0 {
		return email
	}
	return strings.Join(parts, " ")
}

// The word lists, one string each, items separated by "|".
const (
	wordsFirstNames = "Alice|Bruno|Chloé|Dmitri|Emma|Farid|Grace|Hiro|Ines|Jonas|Kavya|Liam|Maya|Noah|" +
		"Olga|Priya|Quentin|Rosa|Samir|Tara|Umar|Vera|Wei|Ximena|Yusuf|Zoe"
	wordsLastNames = "Andersen|Baker|Chen|Dubois|Evans|Fischer|García|Hughes|Ito|Jensen|Kowalski|Lopez|" +
		"Müller|Nakamura|Okafor|Patel|Rossi|Silva|Tanaka|Usman|Varga|Weber|Young|Zhang"
	wordsDomains = "example.com|acme.example|initech.example|globex.example|umbrella.example|hooli.example|gmail.example"
	wordsCc      = "team@acme.example|ops@initech.example|finance@globex.example|founders@hooli.example"
	wordsTopics  = "the Q3 roadmap|the offsite|invoice 4821|the contract renewal|the launch plan|" +
		"the budget review|the hiring plan|the customer call|the new pricing|the migration|" +
		"the design review|the board deck|the security audit|the onboarding docs|the release notes"
	wordsSubjects = "Quick question about {topic}|Notes from today on {topic}|Follow-up: {topic}|" +
		"Can we move {topic} to Thursday?|Draft for {topic}|Feedback wanted on {topic}|" +
		"Invoice #{n}|Lunch next week?|Re-scheduling our 1:1|Your order #{n} has shipped|" +
		"Agenda for {topic}|FYI: {topic}"
	wordsSentences = "I had a look at {topic} and left a few comments.|" +
		"Could you send me the latest numbers for {topic}?|" +
		"Let's sync on {topic} before Friday.|" +
		"The team is mostly happy with {topic}, a few details remain.|" +
		"I attached my notes from the meeting about {topic}.|" +
		"Nothing urgent, but {topic} needs an owner.|" +
		"Thanks again for the help with {topic}!|" +
		"Can you confirm the dates for {topic}?|" +
		"We are waiting on legal for {topic}.|" +
		"I think we can close {topic} this week."
	wordsGreetings   = "Hi|Hello|Hey|Dear|Morning"
	wordsSignoffs    = "Thanks|Best|Cheers|Regards|Talk soon"
	wordsNewsletters = "GitHub <noreply@github.example>|The Weekly Digest <digest@news.example>|" +
		"Calendar <calendar-notification@google.example>|Billing <billing@cloud.example>|" +
		"LinkedIn <messages-noreply@linkedin.example>|Travel Deals <deals@travel.example>"
	wordsNewsletterSubjects = "[mailroom] Pull request #{n} was merged|Your weekly digest|" +
		"Invitation: Planning @ Tue 10:00|Your invoice #{n} is available|You appeared in {n} searches this week|" +
		"Flash sale: 30% off flights|[mailroom] Issue #{n}: flaky test in CI"
	wordsNewsletterBodies = "This is an automated message. You are receiving it because you are subscribed.\n\nManage your notification settings.|" +
		"Here is what happened this week: 3 new comments, 2 merged pull requests and 1 release.\n\nUnsubscribe|" +
		"Your monthly statement is ready. Log in to your account to see the details.\n\nThis mailbox is not monitored."
)

// words holds the word lists of one generator.
type words struct {
	firstNames, lastNames, domains, cc, topics, subjects, sentences        []string
	greetings, signoffs, newsletters, newsletterSubjects, newsletterBodies []string
}

func newWords() words {
	split := func(s string) []string { return strings.Split(s, "|") }
	return words{
		firstNames: split(wordsFirstNames), lastNames: split(wordsLastNames), domains: split(wordsDomains),
		cc: split(wordsCc), topics: split(wordsTopics), subjects: split(wordsSubjects),
		sentences: split(wordsSentences), greetings: split(wordsGreetings), signoffs: split(wordsSignoffs),
		newsletters: split(wordsNewsletters), newsletterSubjects: split(wordsNewsletterSubjects),
		newsletterBodies: split(wordsNewsletterBodies),
	}
}

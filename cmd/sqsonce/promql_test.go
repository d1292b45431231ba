package main

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// promqlRefs is what a PromQL expression names: the series it selects, the
// labels it groups and matches by, and the functions it calls. It is read
// by promqlNames, a tokenizer that knows PromQL's lexical rules and its few
// constructs that hold names: selectors with label matchers, the label
// lists of by, without, on, ignoring, group_left and group_right, function
// and aggregation calls, ranges and subqueries, offset and @. It is not a
// full parser: `promtool check rules` checks the syntax (see
// TestDeploy_PrometheusRules); this finds the names to check against what
// sqsonce exports.
type promqlRefs struct {
	Selectors []promqlSelector
	Labels    []string // named in by, without, on, ignoring, group_left, group_right
	Functions []string // functions and aggregations called
}

// promqlSelector is one vector selector: a metric name and its matchers
// (__name__ taken as the name).
type promqlSelector struct {
	Name     string
	Matchers []promqlMatcher
}

type promqlMatcher struct {
	Label, Op, Value string
}

// promqlFunctions are PromQL's functions; promqlAggregations its
// aggregation operators. A name followed by "(" must be one of them.
var (
	promqlFunctions = words(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
		clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta
		deriv double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate label_join
		label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
		predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
		sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector year`)
	promqlAggregations = words(`avg bottomk count count_values group limit_ratio limitk max min quantile stddev stdvar sum topk`)
	// Keywords that take a parenthesised list of label names.
	promqlLabelLists = words(`by without on ignoring group_left group_right`)
	// Binary operators and modifiers spelt as words.
	promqlWords = words(`and or unless bool atan2`)
)

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// promqlToken kinds.
const (
	tokIdent = iota
	tokString
	tokNumber
	tokDuration
	tokPunct // ( ) { } [ ] , @ and operators
)

type promqlToken struct {
	kind int
	text string // for a string, its value
	pos  int
}

var durationRE = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// promqlTokens splits expr into tokens.
func promqlTokens(expr string) ([]promqlToken, error) {
	var toks []promqlToken
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	inRange := false // between [ and ], where ':' separates durations
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '[' || c == ']' || c == ':' && inRange:
			inRange = c == '[' || c == ':'
			toks = append(toks, promqlToken{tokPunct, string(c), i})
			i++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			raw := expr[i : j+1]
			if c == '\'' {
				raw = `"` + strings.ReplaceAll(strings.ReplaceAll(raw[1:len(raw)-1], `\'`, `'`), `"`, `\"`) + `"`
			}
			v, err := strconv.Unquote(raw)
			if err != nil {
				return nil, fmt.Errorf("bad string %s at %d: %v", expr[i:j+1], i, err)
			}
			toks = append(toks, promqlToken{tokString, v, i})
			i = j + 1
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			j := i
			for j < len(expr) && (isIdent(expr[j]) && expr[j] != ':' || expr[j] == '.' ||
				(expr[j] == '+' || expr[j] == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E') && !strings.HasPrefix(strings.ToLower(expr[i:j]), "0x")) {
				j++
			}
			text := expr[i:j]
			kind := tokNumber
			if durationRE.MatchString(text) {
				kind = tokDuration
			} else if _, err := strconv.ParseFloat(text, 64); err != nil {
				if _, err := strconv.ParseInt(text, 0, 64); err != nil {
					return nil, fmt.Errorf("bad number or duration %q at %d", text, i)
				}
			}
			toks = append(toks, promqlToken{kind, text, i})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			toks = append(toks, promqlToken{tokIdent, expr[i:j], i})
			i = j
		case c == '$':
			return nil, fmt.Errorf("variable outside a string at %d: %q", i, expr[i:min(i+20, len(expr))])
		default:
			op := string(c)
			if i+1 < len(expr) {
				switch two := expr[i : i+2]; two {
				case "==", "!=", "<=", ">=", "=~", "!~":
					op = two
				}
			}
			if !strings.Contains("(){}[],@+-*/%^<>=!:", string(c)) || op == "!" {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, promqlToken{tokPunct, op, i})
			i += len(op)
		}
	}
	return toks, nil
}

// promqlNames reads what expr names.
func promqlNames(expr string) (promqlRefs, error) {
	toks, err := promqlTokens(expr)
	if err != nil {
		return promqlRefs{}, err
	}
	var refs promqlRefs
	depth := map[string]int{}
	at := func(i int) promqlToken {
		if i < len(toks) {
			return toks[i]
		}
		return promqlToken{kind: -1, pos: len(expr)}
	}
	isPunct := func(i int, s string) bool { t := at(i); return t.kind == tokPunct && t.text == s }
	// matchers reads {label op "value", ...} from toks[i], which is "{".
	matchers := func(i int) ([]promqlMatcher, int, error) {
		var ms []promqlMatcher
		i++
		for !isPunct(i, "}") {
			l, op, v := at(i), at(i+1), at(i+2)
			if l.kind != tokIdent && l.kind != tokString {
				return nil, 0, fmt.Errorf("label name expected at %d", l.pos)
			}
			if op.kind != tokPunct || (op.text != "=" && op.text != "!=" && op.text != "=~" && op.text != "!~") {
				return nil, 0, fmt.Errorf("matcher operator expected after %q at %d", l.text, op.pos)
			}
			if v.kind != tokString {
				return nil, 0, fmt.Errorf("string expected after %s%s at %d", l.text, op.text, v.pos)
			}
			ms = append(ms, promqlMatcher{l.text, op.text, v.text})
			i += 3
			if isPunct(i, ",") {
				i++
			} else if !isPunct(i, "}") {
				return nil, 0, fmt.Errorf("',' or '}' expected at %d", at(i).pos)
			}
		}
		return ms, i + 1, nil
	}
	for i := 0; i < len(toks); {
		t := toks[i]
		switch t.kind {
		case tokString, tokNumber, tokDuration:
			i++
		case tokPunct:
			switch t.text {
			case "(", ")":
				depth["("] += map[string]int{"(": 1, ")": -1}[t.text]
				if depth["("] < 0 {
					return refs, fmt.Errorf("unbalanced ')' at %d", t.pos)
				}
				i++
			case "{":
				// A selector without a name before its braces.
				ms, next, err := matchers(i)
				if err != nil {
					return refs, err
				}
				sel := promqlSelector{Matchers: ms}
				for _, m := range ms {
					if m.Label == "__name__" && m.Op == "=" {
						sel.Name = m.Value
					}
				}
				if sel.Name == "" {
					return refs, fmt.Errorf("selector without a metric name at %d", t.pos)
				}
				refs.Selectors = append(refs.Selectors, sel)
				i = next
			case "[":
				// A range or a subquery: durations and ':' only.
				j := i + 1
				for ; j < len(toks) && !isPunct(j, "]"); j++ {
					if tk := toks[j]; tk.kind != tokDuration && !(tk.kind == tokPunct && tk.text == ":") {
						return refs, fmt.Errorf("duration expected in [...] at %d, got %q", tk.pos, tk.text)
					}
				}
				if j == len(toks) {
					return refs, fmt.Errorf("unterminated '[' at %d", t.pos)
				}
				i = j + 1
			case "@":
				if at(i+1).kind == tokNumber {
					i += 2
				} else if n := at(i + 1); n.kind == tokIdent && (n.text == "start" || n.text == "end") && isPunct(i+2, "(") && isPunct(i+3, ")") {
					i += 4
				} else {
					return refs, fmt.Errorf("a time or start() or end() expected after @ at %d", t.pos)
				}
			case "}", "]":
				return refs, fmt.Errorf("unbalanced %q at %d", t.text, t.pos)
			default:
				i++ // an operator
			}
		case tokIdent:
			word := strings.ToLower(t.text)
			switch {
			case promqlLabelLists[word]:
				if !isPunct(i+1, "(") {
					if word == "group_left" || word == "group_right" {
						i++
						continue
					}
					return refs, fmt.Errorf("'(' expected after %s at %d", t.text, t.pos)
				}
				j := i + 2
				for !isPunct(j, ")") {
					if at(j).kind != tokIdent {
						return refs, fmt.Errorf("label name expected in %s (...) at %d", t.text, at(j).pos)
					}
					refs.Labels = append(refs.Labels, at(j).text)
					j++
					if isPunct(j, ",") {
						j++
					} else if !isPunct(j, ")") {
						return refs, fmt.Errorf("',' or ')' expected in %s (...) at %d", t.text, at(j).pos)
					}
				}
				i = j + 1
			case promqlWords[word]:
				i++
			case word == "offset":
				j := i + 1
				if isPunct(j, "-") {
					j++
				}
				if at(j).kind != tokDuration {
					return refs, fmt.Errorf("duration expected after offset at %d", at(j).pos)
				}
				i = j + 1
			case word == "inf" || word == "nan":
				i++
			case promqlAggregations[t.text]:
				refs.Functions = append(refs.Functions, t.text)
				i++
			case isPunct(i+1, "("):
				if !promqlFunctions[t.text] {
					return refs, fmt.Errorf("unknown function %q at %d", t.text, t.pos)
				}
				refs.Functions = append(refs.Functions, t.text)
				i++
			default:
				sel := promqlSelector{Name: t.text}
				i++
				if isPunct(i, "{") {
					ms, next, err := matchers(i)
					if err != nil {
						return refs, err
					}
					sel.Matchers, i = ms, next
				}
				refs.Selectors = append(refs.Selectors, sel)
			}
		}
	}
	if depth["("] != 0 {
		return refs, fmt.Errorf("unbalanced parentheses")
	}
	return refs, nil
}

func TestPromQLNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		want promqlRefs
	}{
		{`up`, promqlRefs{Selectors: []promqlSelector{{Name: "up"}}}},
		{
			`sum by (le, call) (rate(sqsonce_ledger_call_duration_seconds_bucket{job=~"$job", call!="sweep"}[5m]))`,
			promqlRefs{
				Selectors: []promqlSelector{{"sqsonce_ledger_call_duration_seconds_bucket", []promqlMatcher{{"job", "=~", "$job"}, {"call", "!=", "sweep"}}}},
				Labels:    []string{"le", "call"},
				Functions: []string{"sum", "rate"},
			},
		},
		{
			// The grouping after the call; keywords in strings and in
			// names; a subquery, offset, @, comments, numbers.
			"max(x_total{a='by', b=`on(c)`}[10m:1m] offset -5m @ 1700000000) without (instance) # by (nothing)\n" +
				` / on (job) group_left (queue) info_metric > bool 1e-3 and vector(0x1F) or sum_by_total`,
			promqlRefs{
				Selectors: []promqlSelector{
					{"x_total", []promqlMatcher{{"a", "=", "by"}, {"b", "=", "on(c)"}}},
					{"info_metric", nil},
					{"sum_by_total", nil},
				},
				Labels:    []string{"instance", "job", "queue"},
				Functions: []string{"max", "vector"},
			},
		},
		{
			`{__name__="sqsonce_ledger_up", instance!~"w.*",} == 0 unless on(job) group_right sqsonce_x @ start()`,
			promqlRefs{Selectors: []promqlSelector{
				{"sqsonce_ledger_up", []promqlMatcher{{"__name__", "=", "sqsonce_ledger_up"}, {"instance", "!~", "w.*"}}},
				{"sqsonce_x", nil},
			}, Labels: []string{"job"}},
		},
		{
			`histogram_quantile(0.99, sum(rate(h_bucket[1h30m])) by (le)) * -Inf`,
			promqlRefs{Selectors: []promqlSelector{{Name: "h_bucket"}}, Labels: []string{"le"}, Functions: []string{"histogram_quantile", "sum", "rate"}},
		},
	}
	for _, c := range cases {
		got, err := promqlNames(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.expr, got, c.want)
		}
	}
	for _, bad := range []string{
		`histogram_quantlie(0.9, x)`,      // a misspelt function
		`rate(x[$__rate_interval])`,       // a variable left outside a string
		`x{job="a}`,                       // unterminated string
		`x{job=a}`,                        // matcher value not a string
		`x{job~"a"}`,                      // no such operator
		`sum(rate(x[5m])`,                 // unbalanced
		`x[5q]`,                           // not a duration
		`sum by x (y)`,                    // by without its list
		`{job="a"}`,                       // no metric name
		`x offset y`,                      // offset without a duration
		`x{a="b" c="d"}`,                  // no comma
		`rate(x{a="b"}[5m] by (le)) }`,    // unbalanced brace
		`x @ foo()`,                       // @ takes a time or start()/end()
		`sum without (instance, "job") x`, // a string in a label list
	} {
		if refs, err := promqlNames(bad); err == nil {
			t.Errorf("%s: no error, got %+v", bad, refs)
		}
	}
}

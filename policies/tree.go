package policies

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The policy file is read in two passes. The first hands the bytes to
// go-toml, which checks that they are a valid TOML document (syntax, escapes,
// duplicate keys, redefined tables) and reports the line of any fault. The
// second walks the same document with go-toml's parser and builds a small tree
// in which every value remembers the line of its key, so that every later
// error, including the policy's own checks, names a line.

// node is one value of the document: a scalar, an array or a table.
type node struct {
	line  int
	kind  unstable.Kind // String, Integer, Bool, Float, Array, Table or a date kind
	str   string        // String
	num   int64         // Integer
	flag  bool          // Bool
	items []*node       // Array
	keys  []string      // Table: keys in document order
	vals  map[string]*node
	aot   bool // Array: an array of tables ([[name]])
}

func newTable(line int) *node {
	return &node{line: line, kind: unstable.Table, vals: map[string]*node{}}
}

// set stores v under key in table t, keeping document order.
func (t *node) set(key string, v *node) {
	if _, ok := t.vals[key]; !ok {
		t.keys = append(t.keys, key)
	}
	t.vals[key] = v
}

// lines maps byte offsets to 1-based line numbers.
type lines []int

func newLines(data []byte) lines {
	var l lines
	for i, b := range data {
		if b == '\n' {
			l = append(l, i)
		}
	}
	return l
}

func (l lines) at(offset uint32) int {
	return sort.SearchInts(l, int(offset)) + 1
}

// readTree checks data with go-toml and returns its tree. Errors are
// *ParseError values that name a line.
func readTree(data []byte, file string) (*node, error) {
	var generic map[string]any
	if err := toml.Unmarshal(data, &generic); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			if line < 1 {
				line = 1
			}
			return nil, &ParseError{File: file, Line: line, Msg: strings.TrimPrefix(de.Error(), "toml: ")}
		}
		return nil, &ParseError{File: file, Line: 1, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	}
	b := &builder{file: file, lines: newLines(data)}
	return b.build(data)
}

type builder struct {
	file  string
	lines lines
}

func (b *builder) errorf(line int, format string, args ...any) error {
	return &ParseError{File: b.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (b *builder) build(data []byte) (*node, error) {
	var p unstable.Parser
	p.Reset(data)
	root := newTable(1)
	cur := root
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			if err := b.keyValue(cur, e); err != nil {
				return nil, err
			}
		case unstable.Table:
			keys, line := b.key(e.Key())
			t, err := b.descend(root, keys, line)
			if err != nil {
				return nil, err
			}
			t.line = line
			cur = t
		case unstable.ArrayTable:
			keys, line := b.key(e.Key())
			parent, err := b.descend(root, keys[:len(keys)-1], line)
			if err != nil {
				return nil, err
			}
			last := keys[len(keys)-1]
			arr, ok := parent.vals[last]
			if !ok {
				arr = &node{line: line, kind: unstable.Array, aot: true}
				parent.set(last, arr)
			}
			if arr.kind != unstable.Array || !arr.aot {
				return nil, b.errorf(line, "%q is not an array of tables", last)
			}
			t := newTable(line)
			arr.items = append(arr.items, t)
			cur = t
		}
	}
	if err := p.Error(); err != nil {
		// go-toml accepted the document in the first pass, so this is not
		// expected; fail closed all the same.
		return nil, b.errorf(1, "%v", err)
	}
	return root, nil
}

// key returns the parts of a dotted key and the line of its first part.
func (b *builder) key(it unstable.Iterator) ([]string, int) {
	var parts []string
	line := 0
	for it.Next() {
		n := it.Node()
		if line == 0 {
			line = b.lines.at(n.Raw.Offset)
		}
		parts = append(parts, string(n.Data))
	}
	if line == 0 {
		line = 1
	}
	return parts, line
}

// descend walks from t along keys, creating tables as needed; an array of
// tables on the way stands for its last element, as in TOML.
func (b *builder) descend(t *node, keys []string, line int) (*node, error) {
	for _, k := range keys {
		next, ok := t.vals[k]
		if !ok {
			next = newTable(line)
			t.set(k, next)
		}
		if next.kind == unstable.Array && next.aot && len(next.items) > 0 {
			next = next.items[len(next.items)-1]
		}
		if next.kind != unstable.Table {
			return nil, b.errorf(line, "%q is not a table", k)
		}
		t = next
	}
	return t, nil
}

func (b *builder) keyValue(t *node, e *unstable.Node) error {
	keys, line := b.key(e.Key())
	if len(keys) == 0 {
		return b.errorf(line, "empty key")
	}
	parent, err := b.descend(t, keys[:len(keys)-1], line)
	if err != nil {
		return err
	}
	v, err := b.value(e.Value(), line)
	if err != nil {
		return err
	}
	parent.set(keys[len(keys)-1], v)
	return nil
}

func (b *builder) value(n *unstable.Node, line int) (*node, error) {
	v := &node{line: line, kind: n.Kind}
	switch n.Kind {
	case unstable.String:
		v.str = string(n.Data)
	case unstable.Bool:
		v.flag = string(n.Data) == "true"
	case unstable.Integer:
		i, err := strconv.ParseInt(strings.ReplaceAll(string(n.Data), "_", ""), 0, 64)
		if err != nil {
			return nil, b.errorf(line, "integer %s: out of range", n.Data)
		}
		v.num = i
	case unstable.Array:
		it := n.Children()
		for it.Next() {
			c := it.Node()
			if c.Kind == unstable.Comment {
				continue
			}
			cl := line
			if c.Raw.Length > 0 {
				cl = b.lines.at(c.Raw.Offset)
			}
			item, err := b.value(c, cl)
			if err != nil {
				return nil, err
			}
			v.items = append(v.items, item)
		}
	case unstable.InlineTable:
		v.kind = unstable.Table
		v.vals = map[string]*node{}
		it := n.Children()
		for it.Next() {
			c := it.Node()
			if c.Kind != unstable.KeyValue {
				continue
			}
			if err := b.keyValue(v, c); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// kindName names a node's kind for error messages.
func kindName(n *node) string {
	switch n.kind {
	case unstable.String:
		return "a string"
	case unstable.Integer:
		return "an integer"
	case unstable.Float:
		return "a number with a fraction"
	case unstable.Bool:
		return "true or false"
	case unstable.Array:
		if n.aot {
			return "an array of tables"
		}
		return "a list"
	case unstable.Table:
		return "a table"
	default:
		return "a date or time"
	}
}

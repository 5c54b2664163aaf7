package canonjson

import (
	"fmt"
	"slices"
	"sort"
	"unicode/utf8"
)

// Document is a JSON text checked by [Parse], ready to be written in
// canonical form by [Document.WriteTo]. It refers to the text given to Parse,
// which must not be modified while the Document is in use.
type Document struct {
	src []byte
	// objs lists, by offset, the objects whose members are not already in
	// key order in the text.
	objs blocks[permuted]
	// perm holds, for each object of objs with three members or more, the
	// offsets of its keys in canonical order; the last offset of each object
	// has lastFlag set.
	perm blocks[uint32]
}

// permuted is an object whose members are written in another order than the
// text's.
type permuted struct {
	start uint32 // offset of the '{'
	// keys is the index in Document.perm of the object's first key in
	// canonical order or, with lastFlag set, the offset of the second key of
	// an object of two members, which are written in reverse order.
	keys uint32
}

// lastFlag marks the last key of an object in Document.perm, and a pair in
// permuted.keys. Offsets are below MaxBytesLimit, so the bit is free.
const lastFlag = 1 << 31

// Container kinds on the parser's and the writer's stacks.
const (
	kindArray byte = iota
	kindObject
	kindPermuted // an object written in another order than the text's
)

// Parse checks that src is a JSON text it can canonicalise and returns it
// indexed for [Document.WriteTo]. lim may be nil for the defaults. The
// returned error is an [*Error] wrapping ErrSyntax, ErrDuplicateKey,
// ErrTooDeep, ErrTooLarge or ErrExponentRange.
//
// Parse does not copy src: it must not be modified while the Document is in
// use.
func Parse(src []byte, lim *Limits) (*Document, error) {
	l := lim.withDefaults()
	if len(src) > l.MaxBytes {
		return nil, &Error{Offset: l.MaxBytes, Err: ErrTooLarge, Detail: fmt.Sprintf("text longer than %d bytes", l.MaxBytes)}
	}
	p := parser{src: src, maxDepth: l.MaxDepth, doc: &Document{src: src}}
	if err := p.run(); err != nil {
		return nil, err
	}
	sort.Sort(byStart{&p.doc.objs})
	return p.doc, nil
}

// parser checks a text and finds the objects whose members are out of order.
type parser struct {
	src      []byte
	pos      int
	maxDepth int
	doc      *Document

	kinds []byte       // kind of each open container, innermost last
	open  []openObject // the open objects, innermost last
	keys  []uint32     // key offsets of the members of the open objects
}

type openObject struct {
	start uint32 // offset of the '{'
	keys  uint32 // index in parser.keys of the object's first key
}

// byStart sorts permuted objects by offset.
type byStart struct{ l *blocks[permuted] }

func (s byStart) Len() int           { return s.l.n }
func (s byStart) Less(i, j int) bool { return s.l.at(i).start < s.l.at(j).start }
func (s byStart) Swap(i, j int)      { a, b := s.l.at(i), s.l.at(j); *a, *b = *b, *a }

func (p *parser) fail(sentinel error, format string, args ...any) error {
	return &Error{Offset: p.pos, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() { p.pos = skipSpace(p.src, p.pos) }

func skipSpace(src []byte, pos int) int {
	for pos < len(src) {
		switch src[pos] {
		case ' ', '\t', '\n', '\r':
			pos++
		default:
			return pos
		}
	}
	return pos
}

// run parses the whole text, without recursion: the loop reads one value,
// then closes the containers that end after it.
func (p *parser) run() error {
	p.skipSpace()
values:
	for {
		// A value starts at p.pos.
		if len(p.kinds) > p.maxDepth {
			return p.fail(ErrTooDeep, "nesting deeper than %d", p.maxDepth)
		}
		if p.pos >= len(p.src) {
			return p.fail(ErrSyntax, "unexpected end of input")
		}
		switch c := p.src[p.pos]; {
		case c == '{':
			start := p.pos
			p.pos++
			p.skipSpace()
			if p.pos < len(p.src) && p.src[p.pos] == '}' {
				p.pos++
				break
			}
			p.kinds = grow(p.kinds, kindObject)
			p.open = grow(p.open, openObject{start: uint32(start), keys: uint32(len(p.keys))})
			if err := p.key(); err != nil {
				return err
			}
			continue values
		case c == '[':
			p.pos++
			p.skipSpace()
			if p.pos < len(p.src) && p.src[p.pos] == ']' {
				p.pos++
				break
			}
			p.kinds = grow(p.kinds, kindArray)
			continue values
		case c == '"':
			if err := p.string(); err != nil {
				return err
			}
		case c == '-' || isASCIIDigit(c):
			_, end, err := scanNumber(p.src, p.pos)
			if err != nil {
				return err
			}
			p.pos = end
		case p.literal("true"), p.literal("false"), p.literal("null"):
		default:
			return p.fail(ErrSyntax, "unexpected character %q", c)
		}
		// A value ended at p.pos: close the containers that end here.
		for {
			p.skipSpace()
			if len(p.kinds) == 0 {
				if p.pos != len(p.src) {
					return p.fail(ErrSyntax, "unexpected data after the top-level value")
				}
				return nil
			}
			object := p.kinds[len(p.kinds)-1] == kindObject
			if p.pos >= len(p.src) {
				if object {
					return p.fail(ErrSyntax, "unterminated object")
				}
				return p.fail(ErrSyntax, "unterminated array")
			}
			switch c := p.src[p.pos]; {
			case c == ',':
				p.pos++
				p.skipSpace()
				if object {
					if err := p.key(); err != nil {
						return err
					}
				}
				continue values
			case object && c == '}':
				p.pos++
				if err := p.closeObject(); err != nil {
					return err
				}
			case !object && c == ']':
				p.pos++
				p.kinds = p.kinds[:len(p.kinds)-1]
			case object:
				return p.fail(ErrSyntax, "expected ',' or '}'")
			default:
				return p.fail(ErrSyntax, "expected ',' or ']'")
			}
		}
	}
}

func (p *parser) literal(lit string) bool {
	if len(p.src)-p.pos >= len(lit) && string(p.src[p.pos:p.pos+len(lit)]) == lit {
		p.pos += len(lit)
		return true
	}
	return false
}

// key parses an object key and the colon after it, and records the key.
func (p *parser) key() error {
	if p.pos >= len(p.src) || p.src[p.pos] != '"' {
		return p.fail(ErrSyntax, "expected an object key")
	}
	p.keys = grow(p.keys, uint32(p.pos))
	if err := p.string(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos >= len(p.src) || p.src[p.pos] != ':' {
		return p.fail(ErrSyntax, "expected ':'")
	}
	p.pos++
	p.skipSpace()
	return nil
}

// closeObject ends the innermost open object: it rejects a duplicate key and,
// when the keys are out of order, records their canonical order.
func (p *parser) closeObject() error {
	o := p.open[len(p.open)-1]
	p.open = p.open[:len(p.open)-1]
	p.kinds = p.kinds[:len(p.kinds)-1]
	keys := p.keys[o.keys:]
	defer func() { p.keys = p.keys[:o.keys] }()

	ordered := true
	for i := 1; i < len(keys) && ordered; i++ {
		switch c := compareKeys(p.src, keys[i-1], keys[i]); {
		case c == 0:
			return p.duplicate(keys[i])
		case c > 0:
			ordered = false
		}
	}
	if ordered {
		return nil
	}
	if len(keys) == 2 {
		p.doc.objs.push(permuted{start: o.start, keys: keys[1] | lastFlag})
		return nil
	}
	slices.SortFunc(keys, func(a, b uint32) int { return compareKeys(p.src, a, b) })
	for i := 1; i < len(keys); i++ {
		if compareKeys(p.src, keys[i-1], keys[i]) == 0 {
			return p.duplicate(keys[i])
		}
	}
	p.doc.objs.push(permuted{start: o.start, keys: uint32(p.doc.perm.n)})
	for _, k := range keys[:len(keys)-1] {
		p.doc.perm.push(k)
	}
	p.doc.perm.push(keys[len(keys)-1] | lastFlag)
	return nil
}

func (p *parser) duplicate(key uint32) error {
	var b []byte
	r := keyReader{src: p.src, pos: int(key) + 1}
	for c, ok := r.next(); ok; c, ok = r.next() {
		b = append(b, c)
	}
	return p.fail(ErrDuplicateKey, "duplicate object key %q", b)
}

// string checks the string whose opening quote is at p.pos and moves past
// its closing quote.
func (p *parser) string() error {
	p.pos++ // "
	for {
		if p.pos >= len(p.src) {
			return p.fail(ErrSyntax, "unterminated string")
		}
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			return nil
		case c < 0x20:
			return p.fail(ErrSyntax, "control character in string")
		case c == '\\':
			_, n, msg := decodeEscape(p.src, p.pos)
			if msg != "" {
				return p.fail(ErrSyntax, "%s", msg)
			}
			p.pos += n
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.src[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return p.fail(ErrSyntax, "invalid UTF-8")
			}
			p.pos += size
		}
	}
}

func isASCIIDigit(c byte) bool { return c >= '0' && c <= '9' }

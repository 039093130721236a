/* The DFTracer event lines of a text block, scanned straight into Arrow buffers.
 *
 * A DFTracer trace is one JSON object per line, and the reader wants a dozen fields of each: integers (pid, tid,
 * ts, dur, args.size...) and strings (name, cat, args.fhash...). A general JSON parser builds every value and then
 * the reader picks; this scanner validates each line as JSON and keeps only the wanted fields, as Arrow buffers
 * (int64 values, string offsets and data, validity bitmaps) that pyarrow wraps without a copy.
 *
 * It is exact or it declines: whatever it cannot read exactly as the reader's other parsers would (a line that is
 * not one JSON object, an escaped string or key, a wanted field of another JSON type, a number that is not a plain
 * int64 integer, a wanted key twice, invalid UTF-8, a line too long) makes scan() return None, and the reader
 * parses the block as before (DuckDB, then pyarrow, then line by line, each naming what it skips).
 *
 * scan(body, top_fields, arg_fields, max_line) -> None | (rows, top_columns, args_bitmap, args_nulls, arg_columns)
 *   top_fields / arg_fields: tuples of (key: bytes, kind: INTEGER, STRING or DICTIONARY), the columns wanted at the
 *   top level and in "args"; each column comes back as (bitmap, nulls, values) for an integer (int64),
 *   (bitmap, nulls, offsets, data) for a string (int32 offsets), (bitmap, nulls, indices, offsets, data) for a
 *   dictionary-encoded string (int32 indices into its distinct strings, in order of first appearance, as Arrow's
 *   dictionary_encode gives them), all bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the key words of same_key() assume a little-endian machine"
#endif

#define MAX_FIELDS 32
#define MAX_MEMBERS 32
enum { INTEGER = 0, STRING = 1, DICTIONARY = 2 };
#define MAX_DEPTH 64

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    uint64_t prefix;            /* the key's bytes as a little word, zero-padded (keys of up to 8 bytes) */
    int kind;
    PyObject *bitmap, *values;  /* bytes: validity bitmap; int64 values, int32 offsets or int32 indices */
    uint8_t *bits;
    int64_t *ints;
    int32_t *offsets;           /* a string's, or a dictionary's distinct strings' (grown by realloc) */
    int32_t *indices;
    char *data;                 /* string data, grown by realloc, copied out at the end */
    Py_ssize_t data_len, data_cap, nulls;
    int32_t *slots;             /* DICTIONARY: open addressing, -1 empty, else an index into the distinct strings */
    Py_ssize_t n_slots, distinct, offsets_cap;
    Py_ssize_t last_row;        /* the row this column was last set in: a key twice on a line declines */
    Py_ssize_t offsets_done;    /* STRING: offsets[0..offsets_done] are set */
    int32_t last_index;         /* DICTIONARY: the distinct string the last row held, -1 before any */
} Column;

typedef struct {
    Column cols[MAX_FIELDS];
    int n;
    /* by_hash[key_hash(key)]: 0 no wanted key has that hash (the key is passed over), c + 1 column c, or
     * COLLIDED: look through them all */
    unsigned char by_hash[256];
    /* The members of the last object scanned, by position: where its `"key":` bytes are in the body, how long, and
     * what they named (column c + 1, ARGS_MEMBER, or 0: passed over). A line whose member i starts with the same
     * bytes names the same thing: they were read and validated then, and the body does not change while it is
     * scanned, so the key is neither scanned nor looked up again (DFTracer writes every line's keys in one order). */
    const char *member_at[MAX_MEMBERS];
    unsigned char member_len[MAX_MEMBERS], member_is[MAX_MEMBERS];
} Columns;

#define ARGS_MEMBER 254
#define ONES 0x0101010101010101ull  /* a byte of 1 in each of a word's eight */

#define COLLIDED 255

static inline unsigned key_hash(const char *key, Py_ssize_t len) {
    return len ? ((unsigned)len * 7u + (unsigned char)key[0] + (unsigned char)key[len - 1] * 3u) & 255u : 0u;
}

/* plain[c]: a byte a string holds as itself (printable ASCII but '"' and '\\'), filled by the module's init */
static unsigned char plain[256];

static inline const char *skip_ws(const char *p, const char *e) {
    if (p < e && (unsigned char)*p > ' ') return p;  /* the common case: compact JSON */
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* A JSON string starting at *pp (on the quote). Sets its contents [*s, *s + *len) and whether it holds an
 * escape; returns 0 when it is not valid JSON (unterminated, control character, bad escape, invalid UTF-8). */
static int scan_string(const char **pp, const char *e, const char **s, Py_ssize_t *len, int *escaped) {
    const unsigned char *p = (const unsigned char *)*pp + 1, *end = (const unsigned char *)e;
    const unsigned char *start = p;
    *escaped = 0;
    while (p < end) {
        for (uint64_t w; end - p >= 8; p += 8) {  /* the common case, a word at a time: printable ASCII */
            memcpy(&w, p, 8);
            /* a byte below 0x20, '"', '\\' or from 0x80 up: a zero byte of (w - 0x20 ...) with its borrow, of
             * w ^ '"', of w ^ '\\', or a high bit */
            uint64_t x = w ^ 0x22 * ONES, y = w ^ 0x5C * ONES;
            if ((((w - 0x20 * ONES) | (x - ONES) | (y - ONES)) & ~w & 0x80 * ONES) || (w & 0x80 * ONES)) break;
        }
        while (p < end && plain[*p]) p++;
        if (p >= end) break;
        unsigned char c = *p;
        if (c == '"') {
            *s = (const char *)start;
            *len = (const char *)p - (const char *)start;
            *pp = (const char *)p + 1;
            return 1;
        }
        if (c < 0x20) return 0;
        if (c == '\\') {
            *escaped = 1;
            if (p + 1 >= end) return 0;
            c = p[1];
            if (c == 'u') {
                unsigned code = 0;
                if (p + 6 > end) return 0;
                for (int i = 2; i < 6; i++) {
                    unsigned h = p[i];
                    if (h >= '0' && h <= '9') code = code * 16 + (h - '0');
                    else if ((h | 32) >= 'a' && (h | 32) <= 'f') code = code * 16 + ((h | 32) - 'a' + 10);
                    else return 0;
                }
                if (code >= 0xD800 && code <= 0xDFFF) return 0;  /* parsers differ on a lone surrogate */
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                p += 2;
            } else {
                return 0;
            }
            continue;
        }
        if (c < 0x80) { p++; continue; }
        /* UTF-8: the lead byte's sequence length, continuation bytes, no overlongs, surrogates or > U+10FFFF */
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (p + n >= end) return 0;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += n + 1;
    }
    return 0;
}

/* The bytes of the word `w` (8 bytes of text, the first in the low byte) that are not ASCII digits: a non-zero
 * byte for each (exact up to the first one; a carry only reaches the bytes after it) */
static inline uint64_t non_digits(uint64_t w) {
    return ((w & 0xF0 * ONES) ^ 0x30 * ONES) | (((w + 0x06 * ONES) & 0xF0 * ONES) ^ 0x30 * ONES);
}

/* The value of the 8 ASCII digits of `w`, the first in the low byte (most significant first) */
static inline uint64_t eight_digits(uint64_t w) {
    w = (w & 0x0F * ONES) * 2561 >> 8;
    w = (w & 0x00FF00FF00FF00FFull) * 6553601 >> 16;
    return (w & 0x0000FFFF0000FFFFull) * 42949672960001ull >> 32;
}

/* The value of the first `n` (0 to 7) ASCII digits of `w`: padded with leading zeros to eight */
static inline uint64_t digits(uint64_t w, unsigned n) {
    return n ? eight_digits((w << (8 * (8 - n))) | (0x30 * ONES >> (8 * n))) : 0;
}

/* A plain non-negative integer of up to 16 digits at *pp, read a word at a time; 0 when it is anything else (a
 * sign, a fraction, an exponent, a leading zero, 17 digits or more, or too near the end): scan_number reads it */
static inline int quick_integer(const char **pp, const char *e, int64_t *value) {
    const char *p = *pp;
    if (e - p < 17) return 0;
    uint64_t w0, w1;
    memcpy(&w0, p, 8);
    uint64_t nd = non_digits(w0);
    unsigned n;
    uint64_t v;
    if (nd) {
        n = (unsigned)__builtin_ctzll(nd) >> 3;
        v = digits(w0, n);
    } else {
        memcpy(&w1, p + 8, 8);
        nd = non_digits(w1);
        if (!nd) return 0;
        unsigned n1 = (unsigned)__builtin_ctzll(nd) >> 3;
        static const uint64_t pow10[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
        v = eight_digits(w0) * pow10[n1] + digits(w1, n1);
        n = 8 + n1;
    }
    if (n == 0 || (n > 1 && *p == '0')) return 0;
    char next = p[n];
    if (next == '.' || next == 'e' || next == 'E') return 0;
    *value = (int64_t)v;
    *pp = p + n;
    return 1;
}

/* A JSON number at *pp. Sets *is_int (no fraction nor exponent, and fits int64) and *value; 0 when invalid. */
static int scan_number(const char **pp, const char *e, int *is_int, int64_t *value) {
    if (quick_integer(pp, e, value)) {
        *is_int = 1;
        return 1;
    }
    const char *p = *pp;
    int negative = 0, overflow = 0;
    uint64_t v = 0;
    if (p < e && *p == '-') { negative = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return 0;
    const char *first = p;
    if (*p == '0') {
        p++;
    } else {
        while (p < e && *p >= '0' && *p <= '9') {
            v = v * 10 + (unsigned)(*p - '0');  /* exact up to 19 digits; longer ones are checked below */
            p++;
        }
    }
    Py_ssize_t int_digits = p - first;
    if (int_digits > 19) {
        overflow = 1;
    } else if (int_digits == 19) {  /* 1e18 <= v < 1e19 < 2^64: wrapped past 2^64 if the leading digits say so */
        uint64_t top = 0;
        for (const char *q = first; q < p - 1; q++) top = top * 10 + (unsigned)(*q - '0');
        if (top > (UINT64_MAX - (unsigned)(p[-1] - '0')) / 10) overflow = 1;
    }
    *is_int = 1;
    if (p < e && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= e || *p < '0' || *p > '9') return 0;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        /* DLIO writes sizes as 1.04858e+06. Parsers differ where a double overflows (1e999): an exponent of more
         * than two digits, or more than 200 digits before the point, declines */
        *is_int = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == digits || p - digits > 2 || int_digits > 200) return 0;
    }
    if (overflow || (!negative && v > (uint64_t)INT64_MAX) || (negative && v > (uint64_t)INT64_MAX + 1)) *is_int = 0;
    if (*is_int) *value = negative ? (int64_t)(0 - v) : (int64_t)v;
    *pp = p;
    return 1;
}

static int literal(const char **pp, const char *e, const char *word, size_t n) {
    if ((size_t)(e - *pp) < n || memcmp(*pp, word, n) != 0) return 0;
    *pp += n;
    return 1;
}

/* Any JSON value at *pp, validated and passed over; 0 when invalid or nested deeper than MAX_DEPTH. */
static int skip_value(const char **pp, const char *e, int depth) {
    const char *p = skip_ws(*pp, e);
    if (p >= e) return 0;
    const char *s;
    Py_ssize_t len;
    int flag;
    int64_t v;
    switch (*p) {
    case '"':
        if (!scan_string(&p, e, &s, &len, &flag)) return 0;
        break;
    case '{':
    case '[': {
        char close = *p == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return 0;
        p = skip_ws(p + 1, e);
        if (p < e && *p == close) { p++; break; }
        for (;;) {
            if (close == '}') {
                if (p >= e || *p != '"' || !scan_string(&p, e, &s, &len, &flag)) return 0;
                p = skip_ws(p, e);
                if (p >= e || *p != ':') return 0;
                p++;
            }
            if (!skip_value(&p, e, depth + 1)) return 0;
            p = skip_ws(p, e);
            if (p < e && *p == ',') { p = skip_ws(p + 1, e); continue; }
            if (p < e && *p == close) { p++; break; }
            return 0;
        }
        break;
    }
    case 't': if (!literal(&p, e, "true", 4)) return 0; break;
    case 'f': if (!literal(&p, e, "false", 5)) return 0; break;
    case 'n': if (!literal(&p, e, "null", 4)) return 0; break;
    default:
        if (!scan_number(&p, e, &flag, &v)) return 0;
    }
    *pp = p;
    return 1;
}

/* Whether ``key`` (``len`` bytes, inside a line that goes on to ``e``) is column ``c``'s: a key of up to 8 bytes
 * with room after it in the line is compared as one word */
static inline int same_key(const Column *c, const char *key, Py_ssize_t len, const char *e) {
    if (c->key_len != len) return 0;
    if (len <= 8 && e - key >= 8) {
        uint64_t word;
        memcpy(&word, key, 8);
        if (len < 8) word &= ((uint64_t)1 << (8 * len)) - 1;  /* little-endian: the key's bytes are the low ones */
        return word == c->prefix;
    }
    for (Py_ssize_t k = 0; k < len; k++)
        if (c->key[k] != key[k]) return 0;
    return 1;
}

/* The wanted column of this key, or NULL: most keys are told apart by their hash alone. */
static Column *find(Columns *cs, const char *key, Py_ssize_t len, const char *e) {
    unsigned slot = cs->by_hash[key_hash(key, len)];
    if (slot == 0) return NULL;
    if (slot != COLLIDED) return same_key(&cs->cols[slot - 1], key, len, e) ? &cs->cols[slot - 1] : NULL;
    for (int i = 0; i < cs->n; i++)
        if (same_key(&cs->cols[i], key, len, e)) return &cs->cols[i];
    return NULL;
}

/* `len` bytes at `s` added to the column's string data; 0 when it cannot grow. */
static int append(Column *c, const char *s, Py_ssize_t len) {
    if (c->data_len + len > INT32_MAX) return 0;
    if (c->data_len + len > c->data_cap) {
        Py_ssize_t cap = c->data_cap * 2 > c->data_len + len ? c->data_cap * 2 : c->data_len + len + 4096;
        char *grown = realloc(c->data, (size_t)cap);
        if (grown == NULL) return 0;
        c->data = grown;
        c->data_cap = cap;
    }
    memcpy(c->data + c->data_len, s, (size_t)len);
    c->data_len += len;
    return 1;
}

/* Whether the `len` bytes at `a` and at `b` are equal: a word at a time (the strings compared are short). */
static inline int same_bytes(const char *a, const char *b, Py_ssize_t len) {
    for (; len >= 8; a += 8, b += 8, len -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (; len > 0; a++, b++, len--)
        if (*a != *b) return 0;
    return 1;
}

/* A hash of the `len` bytes at `s`, a word at a time (a multiply per byte was a fifth of the scan). */
static inline uint64_t string_hash(const char *s, Py_ssize_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    for (; len >= 8; s += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    for (Py_ssize_t i = 0; i < len; i++) w |= (uint64_t)(unsigned char)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

/* The index of the string `s` among the column's distinct strings, added when new; -1 when memory runs out. */
static int32_t intern(Column *c, const char *s, Py_ssize_t len) {
    int32_t last = c->last_index;  /* a trace repeats a row's host, file, name... on the next rows */
    if (last >= 0 && c->offsets[last + 1] - c->offsets[last] == len && same_bytes(c->data + c->offsets[last], s, len))
        return last;
    if (2 * (c->distinct + 1) > c->n_slots) {  /* at most half full: grow, and place every string again */
        Py_ssize_t n = c->n_slots ? 2 * c->n_slots : 64;
        int32_t *slots = malloc((size_t)n * sizeof *slots);
        if (slots == NULL || c->distinct >= INT32_MAX - 1) { free(slots); return -1; }
        memset(slots, 0xff, (size_t)n * sizeof *slots);
        for (int32_t d = 0; d < c->distinct; d++) {
            uint64_t at = string_hash(c->data + c->offsets[d], c->offsets[d + 1] - c->offsets[d]) & (uint64_t)(n - 1);
            while (slots[at] >= 0) at = (at + 1) & (uint64_t)(n - 1);
            slots[at] = d;
        }
        free(c->slots);
        c->slots = slots;
        c->n_slots = n;
    }
    uint64_t at = string_hash(s, len) & (uint64_t)(c->n_slots - 1);
    for (;; at = (at + 1) & (uint64_t)(c->n_slots - 1)) {
        int32_t d = c->slots[at];
        if (d < 0) break;
        if (c->offsets[d + 1] - c->offsets[d] == len && same_bytes(c->data + c->offsets[d], s, len))
            return c->last_index = d;
    }
    if (c->distinct + 2 > c->offsets_cap) {
        Py_ssize_t cap = c->offsets_cap * 2 + 64;
        int32_t *grown = realloc(c->offsets, (size_t)cap * sizeof *grown);
        if (grown == NULL) return -1;
        c->offsets = grown;
        c->offsets_cap = cap;
    }
    if (!append(c, s, len)) return -1;
    int32_t d = (int32_t)c->distinct++;
    c->offsets[d + 1] = (int32_t)c->data_len;
    c->slots[at] = d;
    return c->last_index = d;
}

/* The end offsets of a STRING column's rows up to `row` (those with no string are empty). */
static inline void offsets_upto(Column *c, Py_ssize_t row) {
    for (Py_ssize_t r = c->offsets_done + 1; r <= row; r++) c->offsets[r] = (int32_t)c->data_len;
    if (row > c->offsets_done) c->offsets_done = row;
}

/* The value of a wanted field into its column, row `row`; 0 declines (another type, escaped, not int64...). */
static int take(Column *c, const char **pp, const char *e, Py_ssize_t row) {
    const char *p = *pp;
    if (c->last_row == row) return 0;
    c->last_row = row;
    if (p < e && *p == 'n') {
        if (!literal(&p, e, "null", 4)) return 0;
        *pp = p;
        return 1;  /* its validity bit stays 0 */
    }
    if (c->kind != INTEGER) {
        const char *s;
        Py_ssize_t len;
        int escaped;
        if (p >= e || *p != '"' || !scan_string(&p, e, &s, &len, &escaped) || escaped) return 0;
        if (c->kind == DICTIONARY) {
            int32_t index = intern(c, s, len);
            if (index < 0) return 0;
            c->indices[row] = index;
        } else {
            offsets_upto(c, row);  /* the rows before this one without a string */
            if (!append(c, s, len)) return 0;
            c->offsets[row + 1] = (int32_t)c->data_len;
            c->offsets_done = row + 1;
        }
    } else {
        int is_int;
        int64_t v;
        if (!scan_number(&p, e, &is_int, &v) || !is_int) return 0;
        c->ints[row] = v;
    }
    c->bits[row >> 3] |= (uint8_t)(1u << (row & 7));
    *pp = p;
    return 1;
}

/* Closes every column after `rows` rows: the rows a column has no value in are its nulls (their values were
 * zeroed at the start), and a STRING column's offsets run to the end. */
static void finish(Columns *cs, Py_ssize_t rows) {
    for (int i = 0; i < cs->n; i++) {
        Column *c = &cs->cols[i];
        Py_ssize_t set = 0, n = (rows + 7) / 8, k = 0;
        for (; k + 8 <= n; k += 8) {
            uint64_t w;
            memcpy(&w, c->bits + k, 8);
            set += __builtin_popcountll(w);
        }
        for (; k < n; k++) set += __builtin_popcount(c->bits[k]);
        c->nulls = rows - set;
        if (c->kind == STRING) offsets_upto(c, rows);
    }
}

/* Whether the `len` bytes at `p` (in a line going on to `e`) are those at `q`, earlier in the body: a member's
 * `"key":` of up to 16 bytes is compared as two words (the bytes after `q` are the body's too), not by memcmp */
static inline int same_member(const char *p, const char *q, unsigned len, const char *e) {
    if (len <= 16 && e - p >= 16) {
        uint64_t a0, b0, a1, b1;
        memcpy(&a0, p, 8);
        memcpy(&b0, q, 8);
        if (len <= 8) return ((a0 ^ b0) & (len == 8 ? ~0ull : ((1ull << (8 * len)) - 1))) == 0;
        memcpy(&a1, p + 8, 8);
        memcpy(&b1, q + 8, 8);
        return a0 == b0 && ((a1 ^ b1) & (len == 16 ? ~0ull : ((1ull << (8 * (len - 8))) - 1))) == 0;
    }
    return (Py_ssize_t)len <= e - p && memcmp(p, q, len) == 0;
}

/* One object's members at *pp (just after its '{'), wanted ones into `cs`, row `row`. With `args` given, the
 * member "args" is scanned into it (an object, or null). 0 declines. */
static int scan_object(const char **pp, const char *e, Columns *cs, Columns *args, uint8_t *args_bits,
                       Py_ssize_t *args_seen, Py_ssize_t row) {
    const char *p = skip_ws(*pp, e), *key;
    Py_ssize_t key_len;
    int escaped;
    if (p < e && *p == '}') { *pp = p + 1; return 1; }
    for (int member = 0;; member++) {
        Column *c = NULL;
        int is_args = 0;
        unsigned len = member < MAX_MEMBERS ? cs->member_len[member] : 0;
        if (len && same_member(p, cs->member_at[member], len, e)) {
            unsigned is = cs->member_is[member];  /* the same `"key":` as the last object's at this position */
            p = skip_ws(p + len, e);
            if (is == ARGS_MEMBER) is_args = 1;
            else if (is) c = &cs->cols[is - 1];
        } else {
            const char *at = p;
            if (p >= e || *p != '"' || !scan_string(&p, e, &key, &key_len, &escaped) || escaped) return 0;
            p = skip_ws(p, e);
            if (p >= e || *p != ':') return 0;
            p++;
            c = find(cs, key, key_len, e);
            is_args = c == NULL && args != NULL && key_len == 4 && memcmp(key, "args", 4) == 0;
            if (member < MAX_MEMBERS && p - at < 256) {
                cs->member_at[member] = at;
                cs->member_len[member] = (unsigned char)(p - at);
                cs->member_is[member] = c != NULL ? (unsigned char)(c - cs->cols + 1) : is_args ? ARGS_MEMBER : 0;
            }
            p = skip_ws(p, e);
        }
        if (c != NULL) {
            if (!take(c, &p, e, row)) return 0;
        } else if (is_args) {
            if (*args_seen == row) return 0;
            *args_seen = row;
            if (p < e && *p == '{') {
                p++;
                if (!scan_object(&p, e, args, NULL, NULL, NULL, row)) return 0;
                args_bits[row >> 3] |= (uint8_t)(1u << (row & 7));
            } else if (!literal(&p, e, "null", 4)) {
                return 0;
            }
        } else if (!skip_value(&p, e, 1)) {
            return 0;
        }
        p = skip_ws(p, e);
        if (p < e && *p == ',') { p = skip_ws(p + 1, e); continue; }
        if (p < e && *p == '}') { *pp = p + 1; return 1; }
        return 0;
    }
}

static void release(Columns *cs) {
    for (int i = 0; i < cs->n; i++) {
        Py_XDECREF(cs->cols[i].bitmap);
        Py_XDECREF(cs->cols[i].values);
        free(cs->cols[i].data);
        free(cs->cols[i].slots);
        if (cs->cols[i].kind == DICTIONARY) free(cs->cols[i].offsets);
    }
}

/* The columns for `fields` ((key, kind) pairs), with room for `rows` rows; 0 on error (exception set). */
static int setup(Columns *cs, PyObject *fields, Py_ssize_t rows) {
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) > MAX_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "fields: a tuple of at most 32 (key, kind) pairs");
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
        Column *c = &cs->cols[cs->n];
        PyObject *pair = PyTuple_GET_ITEM(fields, i);
        char *key;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            PyBytes_AsStringAndSize(PyTuple_GET_ITEM(pair, 0), &key, &c->key_len) < 0) {
            PyErr_SetString(PyExc_ValueError, "fields: (key: bytes, kind: 0, 1 or 2) pairs");
            return 0;
        }
        c->key = key;
        c->prefix = 0;
        for (Py_ssize_t k = 0; k < c->key_len && k < 8; k++) c->prefix |= (uint64_t)(unsigned char)key[k] << (8 * k);
        unsigned h = key_hash(key, c->key_len);
        cs->by_hash[h] = cs->by_hash[h] ? COLLIDED : (unsigned char)(cs->n + 1);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        if (kind < INTEGER || kind > DICTIONARY) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fields: kind 0 (integer), 1 or 2 (string)");
            return 0;
        }
        c->kind = (int)kind;
        c->last_row = -1;
        c->last_index = -1;
        cs->n++;
        c->bitmap = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
        c->values = PyBytes_FromStringAndSize(NULL, c->kind == STRING ? (rows + 1) * 4 : rows * (c->kind ? 4 : 8));
        if (c->bitmap == NULL || c->values == NULL) return 0;
        c->bits = (uint8_t *)PyBytes_AS_STRING(c->bitmap);
        memset(c->bits, 0, (size_t)(rows + 7) / 8);
        if (c->kind == STRING) {
            c->offsets = (int32_t *)PyBytes_AS_STRING(c->values);
            c->offsets[0] = 0;
            c->offsets_done = 0;
        } else if (c->kind == DICTIONARY) {
            c->indices = (int32_t *)PyBytes_AS_STRING(c->values);
            memset(c->indices, 0, (size_t)rows * 4);  /* a null's index */
            c->offsets = malloc(64 * sizeof *c->offsets);
            if (c->offsets == NULL) { PyErr_NoMemory(); return 0; }
            c->offsets_cap = 64;
            c->offsets[0] = 0;
        } else {
            c->ints = (int64_t *)PyBytes_AS_STRING(c->values);
            memset(c->ints, 0, (size_t)rows * 8);  /* a null's value */
        }
    }
    return 1;
}

static PyObject *results(Columns *cs) {
    PyObject *out = PyTuple_New(cs->n);
    if (out == NULL) return NULL;
    for (int i = 0; i < cs->n; i++) {
        Column *c = &cs->cols[i];
        PyObject *col;
        if (c->kind != INTEGER) {
            PyObject *data = PyBytes_FromStringAndSize(c->data ? c->data : "", c->data_len);
            if (data == NULL) { Py_DECREF(out); return NULL; }
            if (c->kind == DICTIONARY) {
                PyObject *offsets = PyBytes_FromStringAndSize((const char *)c->offsets, (c->distinct + 1) * 4);
                if (offsets == NULL) { Py_DECREF(data); Py_DECREF(out); return NULL; }
                col = Py_BuildValue("(OnONN)", c->bitmap, c->nulls, c->values, offsets, data);
            } else {
                col = Py_BuildValue("(OnON)", c->bitmap, c->nulls, c->values, data);
            }
        } else {
            col = Py_BuildValue("(OnO)", c->bitmap, c->nulls, c->values);
        }
        if (col == NULL) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, col);
    }
    return out;
}

/* The newline bytes in [p, end): one pass of memchr. */
static Py_ssize_t count_newlines(const char *p, const char *end) {
    Py_ssize_t n = 0;
    for (const char *nl; p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL; p = nl + 1) n++;
    return n;
}

static PyObject *scan(PyObject *self, PyObject *args_in) {
    (void)self;
    Py_buffer view;
    PyObject *top_fields, *arg_fields, *out = NULL;
    Py_ssize_t max_line;
    if (!PyArg_ParseTuple(args_in, "y*OOn", &view, &top_fields, &arg_fields, &max_line)) return NULL;
    const char *text = view.buf, *end = text + view.len;
    /* a row per line, the last one whether or not a newline ends it */
    Py_ssize_t rows = count_newlines(text, end) + (view.len > 0 && end[-1] != '\n');
    Columns top, args;
    PyObject *args_bitmap = NULL;
    memset(&top, 0, sizeof top);
    memset(&args, 0, sizeof args);
    int ok = setup(&top, top_fields, rows) && setup(&args, arg_fields, rows);
    if (ok) {
        args_bitmap = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
        ok = args_bitmap != NULL;
    }
    if (!ok) goto done;
    uint8_t *args_bits = (uint8_t *)PyBytes_AS_STRING(args_bitmap);
    memset(args_bits, 0, (size_t)(rows + 7) / 8);
    Py_ssize_t args_seen = -1, args_nulls = 0, row = 0;
    int declined = view.len == 0;
    Py_BEGIN_ALLOW_THREADS
    /* A line's end needs no search of its own: nothing in a JSON object takes a newline (a string holding one
     * raw is not JSON), so the scan of the object stops at it */
    for (const char *p = text; p < end && !declined; row++) {
        const char *line = p;
        if (*p != '{') { declined = 1; break; }
        p++;
        if (!scan_object(&p, end, &top, &args, args_bits, &args_seen, row)) { declined = 1; break; }
        p = skip_ws(p, end);
        if (p < end && *p != '\n') { declined = 1; break; }
        p = p < end ? p + 1 : end;
        if (p - line > max_line) { declined = 1; break; }
        if (!(args_bits[row >> 3] & (1u << (row & 7)))) args_nulls++;
    }
    if (!declined) {
        finish(&top, rows);
        finish(&args, rows);
    }
    Py_END_ALLOW_THREADS
    if (declined) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    PyObject *top_out = results(&top), *args_out = top_out ? results(&args) : NULL;
    if (top_out && args_out) out = Py_BuildValue("(nNOnN)", rows, top_out, args_bitmap, args_nulls, args_out);
    else { Py_XDECREF(top_out); Py_XDECREF(args_out); }
done:
    release(&top);
    release(&args);
    Py_XDECREF(args_bitmap);
    PyBuffer_Release(&view);
    return out;
}

/* newlines(text) -> the number of b"\n" in text: one pass of memchr, where numpy's count made a boolean array of
 * the text and counted it (the reader numbers a block's lines for its warnings) */
static PyObject *newlines(PyObject *self, PyObject *args_in) {
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args_in, "y*", &view)) return NULL;
    const char *p = view.buf;
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = count_newlines(p, p + view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "The wanted fields of a block of DFTracer event lines as Arrow buffers, or None."},
    {"newlines", newlines, METH_VARARGS, "The number of newline bytes in a bytes-like object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pfwscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pfwscan(void) {
    for (int c = 0x20; c < 0x80; c++) plain[c] = c != '"' && c != '\\';
    return PyModule_Create(&module);
}

/* stratagym.envs._speedups: C twins of the pure functions on a text env's step hot path.
 *
 * Why: a SearchQA search step runs right after a retrieval that evicts the env's Python code and data
 * from the CPU caches; the env's own work per step (parse the turn, hash, build the info dict) then
 * costs about a fifth of a bm25s query in Python. The same work in a few hundred instructions of C
 * costs a fraction of that. Every function here is an exact twin of a pure-Python reference that stays
 * in the package (the fallback when this module is not built, or when STRATAGYM_NO_SPEEDUPS=1), and
 * tests/core/test_speedups.py checks the twins against those references on arbitrary inputs:
 *
 *   digest8(data)                       stratagym.envs.core._digest
 *   ctx_push(levels, h, k)              ContextTracker.push_hash's level update
 *   sanitize_str(text, max_chars)       sanitize_action for an exact str and an exact int
 *   make_info(...)                      TextEnv._info's dict (envs without admissible actions)
 *   cut_response / first_action / close_unclosed_tag / parse_turn
 *                                       stratagym.envs.search_qa.protocol's twins (exact str only)
 *   assemble_block(pieces, contents)    PassageText._assemble (the Python path's join of known passages)
 *   format_block(contents)              protocol.format_block: a search's observation and its hash
 *
 * BLAKE2b is written here from RFC 7693 (the only variant used: unkeyed, 8-byte digest); tests check
 * it against hashlib on arbitrary data. Strings are read with PyUnicode_READ, so every PEP 393 kind
 * (ASCII, Latin-1, UCS-2, UCS-4, lone surrogates included) takes the same path.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <limits.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* A dict sized for n keys up front where CPython exports that (3.13 made it internal). */
#if PY_VERSION_HEX < 0x030D0000
#define NEW_DICT(n) _PyDict_NewPresized(n)
#else
#define NEW_DICT(n) PyDict_New()
#endif

/* PyUnicode_READY is a deprecated no-op from 3.12 on (strings are always ready). */
#if PY_VERSION_HEX >= 0x030C0000
#define STR_READY(s) 0
#else
#define STR_READY(s) PyUnicode_READY(s)
#endif

/* ------------------------------------------------------------------------------------------------ */
/* BLAKE2b (RFC 7693), digest length 8, no key                                                       */
/* ------------------------------------------------------------------------------------------------ */

static const uint64_t B2B_IV[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL, 0xA54FF53A5F1D36F1ULL,
    0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL, 0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL,
};

static const uint8_t B2B_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

#define ROTR64(x, n) (((x) >> (n)) | ((x) << (64 - (n))))

#define B2B_G(a, b, c, d, x, y)            \
    do {                                   \
        v[a] = v[a] + v[b] + (x);          \
        v[d] = ROTR64(v[d] ^ v[a], 32);    \
        v[c] = v[c] + v[d];                \
        v[b] = ROTR64(v[b] ^ v[c], 24);    \
        v[a] = v[a] + v[b] + (y);          \
        v[d] = ROTR64(v[d] ^ v[a], 16);    \
        v[c] = v[c] + v[d];                \
        v[b] = ROTR64(v[b] ^ v[c], 63);    \
    } while (0)

static uint64_t load64_le(const unsigned char *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static void store64_le(unsigned char *p, uint64_t x)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(x >> (8 * i));
    }
}

/* The compression function F: one 128-byte block, t = bytes hashed so far (incl. this block). */
static void b2b_compress(uint64_t h[8], const unsigned char block[128], uint64_t t, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2B_IV[i];
    }
    v[12] ^= t; /* the high word of the 128-bit counter stays 0: inputs are far below 2**64 bytes */
    if (last) {
        v[14] = ~v[14];
    }
    for (int i = 0; i < 16; i++) {
        m[i] = load64_le(block + 8 * i);
    }
    /* the rounds written out with constant r, so the compiler resolves the message schedule's
     * indices at compile time (a loop over r reads them from the table at run time) */
#define B2B_ROUND(r)                                                 \
    do {                                                             \
        B2B_G(0, 4, 8, 12, m[B2B_SIGMA[r][0]], m[B2B_SIGMA[r][1]]);   \
        B2B_G(1, 5, 9, 13, m[B2B_SIGMA[r][2]], m[B2B_SIGMA[r][3]]);   \
        B2B_G(2, 6, 10, 14, m[B2B_SIGMA[r][4]], m[B2B_SIGMA[r][5]]);  \
        B2B_G(3, 7, 11, 15, m[B2B_SIGMA[r][6]], m[B2B_SIGMA[r][7]]);  \
        B2B_G(0, 5, 10, 15, m[B2B_SIGMA[r][8]], m[B2B_SIGMA[r][9]]);  \
        B2B_G(1, 6, 11, 12, m[B2B_SIGMA[r][10]], m[B2B_SIGMA[r][11]]); \
        B2B_G(2, 7, 8, 13, m[B2B_SIGMA[r][12]], m[B2B_SIGMA[r][13]]);  \
        B2B_G(3, 4, 9, 14, m[B2B_SIGMA[r][14]], m[B2B_SIGMA[r][15]]);  \
    } while (0)
    B2B_ROUND(0);
    B2B_ROUND(1);
    B2B_ROUND(2);
    B2B_ROUND(3);
    B2B_ROUND(4);
    B2B_ROUND(5);
    B2B_ROUND(6);
    B2B_ROUND(7);
    B2B_ROUND(8);
    B2B_ROUND(9);
    B2B_ROUND(10);
    B2B_ROUND(11);
#undef B2B_ROUND
    for (int i = 0; i < 8; i++) {
        h[i] ^= v[i] ^ v[i + 8];
    }
}

/* BLAKE2b-64 of data, as the integer int.from_bytes(digest, "little") & (2**63 - 1). */
static uint64_t blake2b8(const unsigned char *data, size_t len)
{
    uint64_t h[8];
    unsigned char block[128];
    memcpy(h, B2B_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8ULL; /* depth 1, fanout 1, no key, digest length 8 */
    uint64_t t = 0;
    while (len > 128) { /* every full block but the last one */
        t += 128;
        b2b_compress(h, data, t, 0);
        data += 128;
        len -= 128;
    }
    memset(block, 0, sizeof block);
    if (len) {
        memcpy(block, data, len);
    }
    t += len;
    b2b_compress(h, block, t, 1);
    /* the digest is h[0]'s 8 bytes little-endian, which read back little-endian are h[0] */
    return h[0] & 0x7FFFFFFFFFFFFFFFULL;
}

/* The same hash fed a byte at a time (stable_hash streams the normalised text's UTF-8 through it, so
 * it never builds the normalised string or its bytes). A full buffer is compressed only once another
 * byte arrives: BLAKE2b compresses the last block with the final flag. */
typedef struct {
    uint64_t h[8];
    uint64_t t;
    size_t fill;
    unsigned char buf[128];
} B2bStream;

static void b2b_start(B2bStream *st)
{
    memcpy(st->h, B2B_IV, sizeof st->h);
    st->h[0] ^= 0x01010000ULL ^ 8ULL;
    st->t = 0;
    st->fill = 0;
}

static inline void b2b_byte(B2bStream *st, unsigned char byte)
{
    if (st->fill == 128) {
        st->t += 128;
        b2b_compress(st->h, st->buf, st->t, 0);
        st->fill = 0;
    }
    st->buf[st->fill++] = byte;
}

static uint64_t b2b_end(B2bStream *st)
{
    memset(st->buf + st->fill, 0, 128 - st->fill);
    st->t += st->fill;
    b2b_compress(st->h, st->buf, st->t, 1);
    return st->h[0] & 0x7FFFFFFFFFFFFFFFULL;
}

/* n bytes at once: the buffer is filled by memcpy, and a full one compressed only when more follows. */
static void b2b_bytes(B2bStream *st, const unsigned char *p, size_t n)
{
    while (n) {
        if (st->fill == 128) {
            st->t += 128;
            b2b_compress(st->h, st->buf, st->t, 0);
            st->fill = 0;
        }
        size_t take = 128 - st->fill < n ? 128 - st->fill : n;
        memcpy(st->buf + st->fill, p, take);
        st->fill += take;
        p += take;
        n -= take;
    }
}

/* One code point as UTF-8 with errors="surrogatepass" (a lone surrogate is its plain 3-byte form). */
static inline void b2b_utf8(B2bStream *st, Py_UCS4 c)
{
    if (c < 0x80) {
        b2b_byte(st, (unsigned char)c);
    } else if (c < 0x800) {
        b2b_byte(st, (unsigned char)(0xC0 | (c >> 6)));
        b2b_byte(st, (unsigned char)(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        b2b_byte(st, (unsigned char)(0xE0 | (c >> 12)));
        b2b_byte(st, (unsigned char)(0x80 | ((c >> 6) & 0x3F)));
        b2b_byte(st, (unsigned char)(0x80 | (c & 0x3F)));
    } else {
        b2b_byte(st, (unsigned char)(0xF0 | (c >> 18)));
        b2b_byte(st, (unsigned char)(0x80 | ((c >> 12) & 0x3F)));
        b2b_byte(st, (unsigned char)(0x80 | ((c >> 6) & 0x3F)));
        b2b_byte(st, (unsigned char)(0x80 | (c & 0x3F)));
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Module state: interned constants                                                                 */
/* ------------------------------------------------------------------------------------------------ */

static PyObject *S_SEARCH, *S_ANSWER, *S_INVALID, *S_OPEN_SEARCH, *S_OPEN_ANSWER, *S_CLOSE_SEARCH,
    *S_CLOSE_ANSWER, *S_NO_ACTION, *S_LITTLE;
static PyObject *K_TASK_ID, *K_STEP, *K_ACTION_VALID, *K_TOOL_CALLS, *K_SEARCH_COUNT, *K_STATE_HASH,
    *K_CONTEXT_HASHES, *K_WON, *K_SCORE;
static PyObject *ZERO, *NO_CONTEXT;
static PyObject *S_NFC, *UNICODEDATA_NORMALIZE; /* unicodedata.normalize, imported at module init */
/* Py_UNICODE_ISSPACE for the 128 ASCII characters (str's whitespace: \x1c-\x1f too), filled at init;
 * a table lookup the compiler needs no range check for. */
static unsigned char ASCII_SPACE[128];

/* ------------------------------------------------------------------------------------------------ */
/* digest8 / ctx_push                                                                                */
/* ------------------------------------------------------------------------------------------------ */

static PyObject *digest8(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint64_t d = blake2b8((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(d);
}

/* assemble_block(pieces, contents) -> PassageText.block's join for passages all in the table: the
 * observation "\n\n<information>" + "Doc 1" + shown_1 + ... + "Doc n" + stripped_n + "</information>\n\n"
 * and _digest(b"<information>Doc 1" + normal_1 + b" Doc 2" + normal_2 + ... + b"</information>"), where
 * pieces[content] = (shown, shown.rstrip(), normalised UTF-8). None when a passage is not in the table;
 * NotImplemented for what the Python loop should handle (not a list/tuple of 1..64 items, a piece that
 * is not (str, str, bytes)). One allocation for the text, the digest streamed from the pieces. */
static PyObject *assemble_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_CheckExact(args[0]) || (!PyList_CheckExact(args[1]) && !PyTuple_CheckExact(args[1]))) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *pieces = args[0], *contents = args[1];
    Py_ssize_t n = PyList_CheckExact(contents) ? PyList_GET_SIZE(contents) : PyTuple_GET_SIZE(contents);
    if (n < 1 || n > 64) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* A key's __hash__ / __eq__ (a non-str content, or a dict key that collides with one) runs Python
     * code that may change the list or the dict: each content is held during its lookup, the list's
     * length is read again before each item, and each piece is held from the moment it is found. */
    PyObject *found[64], *obs = NULL, *res = NULL, *h = NULL;
    Py_ssize_t held = 0;
    Py_ssize_t total = 2 + 13 + 16; /* "\n\n<information>" + "</information>\n\n" */
    Py_UCS4 maxchar = 127;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_CheckExact(contents) && i >= PyList_GET_SIZE(contents)) { /* shrunk: the loop in Python */
            res = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        PyObject *content = PyList_CheckExact(contents) ? PyList_GET_ITEM(contents, i) : PyTuple_GET_ITEM(contents, i);
        Py_INCREF(content);
        PyObject *piece = PyDict_GetItemWithError(pieces, content); /* borrowed */
        Py_DECREF(content);
        if (piece == NULL) {
            if (!PyErr_Occurred()) {
                res = Py_NewRef(Py_None);
            }
            goto done;
        }
        if (!PyTuple_CheckExact(piece) || PyTuple_GET_SIZE(piece) != 3 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(piece, 0)) || !PyUnicode_CheckExact(PyTuple_GET_ITEM(piece, 1)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(piece, 2))) {
            res = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        found[held++] = Py_NewRef(piece);
        PyObject *shown = PyTuple_GET_ITEM(piece, i + 1 == n ? 1 : 0);
        if (STR_READY(shown) < 0) {
            goto done;
        }
        Py_ssize_t len_shown = PyUnicode_GET_LENGTH(shown);
        if (len_shown > PY_SSIZE_T_MAX - 6 - total) {
            PyErr_SetString(PyExc_OverflowError, "assemble_block: the block is too long");
            goto done;
        }
        total += (i + 1 >= 10 ? 6 : 5) + len_shown; /* "Doc i" is 5 or 6 characters */
        Py_UCS4 m = PyUnicode_MAX_CHAR_VALUE(shown);
        if (m > maxchar) {
            maxchar = m;
        }
    }
    obs = PyUnicode_New(total, maxchar);
    if (obs == NULL) {
        goto done;
    }
    {
        int kind = PyUnicode_KIND(obs);
        void *data = PyUnicode_DATA(obs);
        Py_ssize_t at = 0;
        const char *head = "\n\n<information>", *tail = "</information>\n\n";
        for (const char *c = head; *c; c++) {
            PyUnicode_WRITE(kind, data, at++, (Py_UCS4)(unsigned char)*c);
        }
        B2bStream st;
        b2b_start(&st);
        b2b_bytes(&st, (const unsigned char *)"<information>", 13);
        for (Py_ssize_t i = 0; i < n; i++) {
            char label[8];
            int len = snprintf(label, sizeof label, "Doc %d", (int)(i + 1));
            for (int j = 0; j < len; j++) {
                PyUnicode_WRITE(kind, data, at++, (Py_UCS4)(unsigned char)label[j]);
            }
            if (i) {
                b2b_byte(&st, ' ');
            }
            b2b_bytes(&st, (const unsigned char *)label, (size_t)len);
            PyObject *shown = PyTuple_GET_ITEM(found[i], i + 1 == n ? 1 : 0), *normal = PyTuple_GET_ITEM(found[i], 2);
            Py_ssize_t len_shown = PyUnicode_GET_LENGTH(shown);
            if (PyUnicode_CopyCharacters(obs, at, shown, 0, len_shown) < 0) {
                goto done;
            }
            at += len_shown;
            b2b_bytes(&st, (const unsigned char *)PyBytes_AS_STRING(normal), (size_t)PyBytes_GET_SIZE(normal));
        }
        for (const char *c = tail; *c; c++) {
            PyUnicode_WRITE(kind, data, at++, (Py_UCS4)(unsigned char)*c);
        }
        b2b_bytes(&st, (const unsigned char *)"</information>", 14);
        if (at != total) {
            PyErr_SetString(PyExc_SystemError, "assemble_block: length mismatch");
            goto done;
        }
        h = PyLong_FromUnsignedLongLong(b2b_end(&st));
    }
    if (h != NULL) {
        res = PyTuple_Pack(2, obs, h);
    }
done:
    for (Py_ssize_t i = 0; i < held; i++) {
        Py_DECREF(found[i]);
    }
    Py_XDECREF(obs);
    Py_XDECREF(h);
    return res;
}

/* stable_hash(text: exact str) -> core.stable_hash(text): BLAKE2b-64 of
 * " ".join(unicodedata.normalize("NFC", text).split()).encode("utf-8", "surrogatepass"), masked. ASCII
 * text is already NFC; other text is normalised by unicodedata itself. The split-and-join is a pass
 * that drops leading and trailing whitespace and turns every inner run (Py_UNICODE_ISSPACE, what
 * str.split() splits on) into one space, streamed into the hash. */
static PyObject *stable_hash(PyObject *self, PyObject *text)
{
    if (!PyUnicode_CheckExact(text)) {
        PyErr_SetString(PyExc_TypeError, "stable_hash takes an exact str");
        return NULL;
    }
    if (STR_READY(text) < 0) {
        return NULL;
    }
    PyObject *norm;
    if (PyUnicode_IS_ASCII(text)) {
        Py_INCREF(text);
        norm = text;
    } else {
        norm = PyObject_CallFunctionObjArgs(UNICODEDATA_NORMALIZE, S_NFC, text, NULL);
        if (norm == NULL) {
            return NULL;
        }
        if (!PyUnicode_Check(norm) || STR_READY(norm) < 0) {
            Py_DECREF(norm);
            PyErr_SetString(PyExc_TypeError, "unicodedata.normalize did not return a str");
            return NULL;
        }
    }
    B2bStream st;
    b2b_start(&st);
    Py_ssize_t n = PyUnicode_GET_LENGTH(norm);
    int kind = PyUnicode_KIND(norm);
    const void *data = PyUnicode_DATA(norm);
    int started = 0, pending = 0;
    if (kind == PyUnicode_1BYTE_KIND && PyUnicode_IS_ASCII(norm)) {
        /* ASCII: compact into a buffer without branching on the text (each whitespace character
         * writes a space that only counts after a non-space; Py_UNICODE_ISSPACE is str's whitespace,
         * \x1c-\x1f included, unlike Py_ISSPACE), drop a trailing space, hash the buffer at once */
        const unsigned char *p = (const unsigned char *)data;
        unsigned char stack[4096], *out = n <= (Py_ssize_t)sizeof stack ? stack : PyMem_Malloc((size_t)n);
        if (out == NULL) {
            Py_DECREF(norm);
            return PyErr_NoMemory();
        }
        size_t k = 0;
        unsigned prev_space = 1; /* the start counts as after a space: leading whitespace is dropped */
        Py_ssize_t i = 0;
#ifdef __SSE2__
        /* 16 bytes at a time where nothing collapses: every byte below 0x21 is a space or a newline and
         * none follows whitespace (or the start); the newlines become spaces and all 16 are kept. Any
         * other chunk (a tab, a control character, a run of whitespace) takes the byte loop. */
        const __m128i below = _mm_set1_epi8(0x21), nl = _mm_set1_epi8('\n'), sp = _mm_set1_epi8(' ');
        while (i + 16 <= n) {
            __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i is_nl = _mm_cmpeq_epi8(x, nl);
            unsigned low = (unsigned)_mm_movemask_epi8(_mm_cmplt_epi8(x, below)); /* ASCII: signed is fine */
            unsigned ws = (unsigned)_mm_movemask_epi8(_mm_or_si128(is_nl, _mm_cmpeq_epi8(x, sp)));
            if (low != ws || (ws & ((ws << 1) | prev_space))) {
                for (Py_ssize_t end = i + 16; i < end; i++) {
                    unsigned char c = p[i];
                    unsigned space = ASCII_SPACE[c];
                    out[k] = space ? (unsigned char)' ' : c;
                    k += !(space & prev_space);
                    prev_space = space;
                }
                continue;
            }
            _mm_storeu_si128((__m128i *)(out + k), _mm_or_si128(_mm_andnot_si128(is_nl, x), _mm_and_si128(is_nl, sp)));
            k += 16;
            prev_space = (ws >> 15) & 1;
            i += 16;
        }
#endif
        for (; i < n; i++) {
            unsigned char c = p[i];
            unsigned space = ASCII_SPACE[c];
            out[k] = space ? (unsigned char)' ' : c;
            k += !(space & prev_space);
            prev_space = space;
        }
        if (prev_space && k) { /* the text ended in whitespace after a word: its one space goes */
            k--;
        }
        uint64_t d = blake2b8(out, k);
        if (out != stack) {
            PyMem_Free(out);
        }
        Py_DECREF(norm);
        return PyLong_FromUnsignedLongLong(d);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (Py_UNICODE_ISSPACE(c)) {
                pending = started;
                continue;
            }
            if (pending) {
                b2b_byte(&st, ' ');
                pending = 0;
            }
            b2b_utf8(&st, c);
            started = 1;
        }
    }
    Py_DECREF(norm);
    return PyLong_FromUnsignedLongLong(b2b_end(&st));
}

/* format_block(contents) -> (observation, stable_hash(observation)) with observation ==
 * protocol.information_block(protocol.format_passages(contents)): "\n\n<information>" + the body
 * stripped + "</information>\n\n", the body being "Doc i(Title: " + title + ") " + text + "\n" per
 * passage, where title, text = content.partition("\n"). NotImplemented for what the Python code should
 * handle (not a list or tuple of 1..64 exact str). The text is written in one allocation straight from
 * the contents, then hashed by stable_hash. Only the body's right end can strip (it starts with "Doc"):
 * the last passage's trailing whitespace and its "\n", and when its text is all whitespace (or absent)
 * the space after ")" too. */
static PyObject *format_block(PyObject *self, PyObject *contents)
{
    if (!PyList_CheckExact(contents) && !PyTuple_CheckExact(contents)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject **items = PyList_CheckExact(contents) ? ((PyListObject *)contents)->ob_item
                                                    : ((PyTupleObject *)contents)->ob_item;
    Py_ssize_t n = Py_SIZE(contents);
    if (n < 1 || n > 64) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* No Python code runs in here (exact str only, no allocation before the lengths are read), so the
     * items stay put; the new string is the only allocation. */
    Py_ssize_t nl[64];
    Py_ssize_t total = 2 + 13 + 16; /* "\n\n<information>" + "</information>\n\n" */
    Py_UCS4 maxchar = 127, maxchar_before_last = 127;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = items[i];
        if (!PyUnicode_CheckExact(c) || STR_READY(c) < 0) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(c);
        Py_ssize_t at = len ? PyUnicode_FindChar(c, '\n', 0, len, 1) : -1;
        if (at == -2) {
            return NULL;
        }
        nl[i] = at;
        /* "Doc i" + "(Title: " + title + ") " + text + "\n": the content's length, its "\n" (if any) out */
        Py_ssize_t add = (i + 1 >= 10 ? 6 : 5) + 8 + 2 + 1 + len - (at >= 0);
        if (len > PY_SSIZE_T_MAX / 2 - total - 32) {
            PyErr_SetString(PyExc_OverflowError, "format_block: the block is too long");
            return NULL;
        }
        total += add;
        if (i + 1 == n) {
            maxchar_before_last = maxchar;
        }
        Py_UCS4 m = PyUnicode_MAX_CHAR_VALUE(c);
        if (m > maxchar) {
            maxchar = m;
        }
    }
    /* the strip at the right end: the last text's trailing whitespace, its "\n", and the space after ")"
     * when nothing of the text is left */
    PyObject *last = items[n - 1];
    Py_ssize_t last_len = PyUnicode_GET_LENGTH(last), text_start = nl[n - 1] >= 0 ? nl[n - 1] + 1 : last_len;
    Py_ssize_t keep = last_len;
    {
        int kind = PyUnicode_KIND(last);
        const void *data = PyUnicode_DATA(last);
        while (keep > text_start && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, keep - 1))) {
            keep--;
        }
    }
    /* a str's kind follows its widest character: when the stripped tail may have held the last passage's
     * widest ones, the kept part's own widest decides */
    if (keep < last_len && PyUnicode_MAX_CHAR_VALUE(last) > maxchar_before_last) {
        int kind = PyUnicode_KIND(last);
        const void *data = PyUnicode_DATA(last);
        maxchar = maxchar_before_last;
        for (Py_ssize_t j = 0; j < keep; j++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, j);
            if (ch > maxchar) {
                maxchar = ch;
            }
        }
    }
    Py_ssize_t strip = (last_len - keep) + 1 + (keep == text_start ? 1 : 0);
    total -= strip;
    PyObject *obs = PyUnicode_New(total, maxchar);
    if (obs == NULL) {
        return NULL;
    }
    int kind = PyUnicode_KIND(obs);
    void *data = PyUnicode_DATA(obs);
    Py_ssize_t at = 0;
#define PUT_ASCII(lit) do { for (const char *q_ = (lit); *q_; q_++) PyUnicode_WRITE(kind, data, at++, (Py_UCS4)(unsigned char)*q_); } while (0)
    PUT_ASCII("\n\n<information>");
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = items[i];
        char label[8];
        snprintf(label, sizeof label, "Doc %d", (int)(i + 1));
        PUT_ASCII(label);
        PUT_ASCII("(Title: ");
        Py_ssize_t len = PyUnicode_GET_LENGTH(c), cut = nl[i];
        Py_ssize_t end = i + 1 == n ? keep : len;
        Py_ssize_t title_end = cut >= 0 ? cut : len;
        if (title_end > 0 && PyUnicode_CopyCharacters(obs, at, c, 0, title_end) < 0) {
            goto fail;
        }
        at += title_end;
        if (i + 1 == n && keep == text_start) { /* the text (and what follows) stripped: ")" only */
            PyUnicode_WRITE(kind, data, at++, ')');
            break;
        }
        PUT_ASCII(") ");
        if (end > title_end + 1 && PyUnicode_CopyCharacters(obs, at, c, title_end + 1, end - title_end - 1) < 0) {
            goto fail;
        }
        at += end > title_end + 1 ? end - title_end - 1 : 0;
        if (i + 1 < n) {
            PyUnicode_WRITE(kind, data, at++, '\n');
        }
    }
    PUT_ASCII("</information>\n\n");
#undef PUT_ASCII
    if (at != total) {
        PyErr_SetString(PyExc_SystemError, "format_block: length mismatch");
        goto fail;
    }
    PyObject *h = stable_hash(NULL, obs);
    if (h == NULL) {
        goto fail;
    }
    PyObject *res = PyTuple_Pack(2, obs, h);
    Py_DECREF(h);
    Py_DECREF(obs);
    return res;
fail:
    Py_DECREF(obs);
    return NULL;
}

/* The 8 little-endian bytes Python's ``h.to_bytes(8, "little")`` gives; 0 on success, -1 with the
 * exception that call raises. Exact ints in range are converted here; anything else (a bool, an int
 * subclass, an out-of-range int, a non-int) goes through the real ``to_bytes`` method, so the result or
 * the error is Python's own. */
static int to8(PyObject *obj, unsigned char out[8])
{
    if (PyLong_CheckExact(obj)) {
#if ULONG_MAX == 0xFFFFFFFFFFFFFFFFULL /* PyLong_AsUnsignedLong reads the digits directly (LP64) */
        unsigned long long x = PyLong_AsUnsignedLong(obj);
#else
        unsigned long long x = PyLong_AsUnsignedLongLong(obj);
#endif
        if (!(x == (unsigned long long)-1 && PyErr_Occurred())) {
            store64_le(out, (uint64_t)x);
            return 0;
        }
        PyErr_Clear(); /* negative or >= 2**64: let to_bytes raise its own OverflowError */
    }
    PyObject *b = PyObject_CallMethod(obj, "to_bytes", "iO", 8, S_LITTLE);
    if (b == NULL) {
        return -1;
    }
    if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) != 8) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_TypeError, "a context hash's to_bytes(8, 'little') must give 8 bytes");
        return -1;
    }
    memcpy(out, PyBytes_AS_STRING(b), 8);
    Py_DECREF(b);
    return 0;
}

/* ctx_push(levels, h, k) -> the new level list [h, combine2(levels[0], h), ..., combine2(levels[k-1], h)]
 * (only as many levels as ``levels`` has, at most k). levels[0] is ``h`` itself. */
static PyObject *ctx_levels(PyObject *levels, PyObject *h, PyObject *k_obj)
{
    if (!PyList_Check(levels)) {
        PyErr_SetString(PyExc_TypeError, "ctx_push: levels must be a list");
        return NULL;
    }
    Py_ssize_t k = PyLong_AsSsize_t(k_obj);
    if (k == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned char msg[20];
    memcpy(msg, "ctx:", 4);
    if (to8(h, msg + 12) < 0) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(levels);
    if (k < 0) { /* Python's levels[:k] for a negative k */
        k = n + k < 0 ? 0 : n + k;
    }
    if (n > k) {
        n = k;
    }
    PyObject *out = PyList_New(n + 1);
    if (out == NULL) {
        return NULL;
    }
    Py_INCREF(h);
    PyList_SET_ITEM(out, 0, h);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(levels)) { /* a level's to_bytes shrank the list: mirror an empty slot */
            PyErr_SetString(PyExc_RuntimeError, "ctx_push: the level list changed during the update");
            Py_DECREF(out);
            return NULL;
        }
        PyObject *p = PyList_GET_ITEM(levels, i);
        Py_INCREF(p);
        int bad = to8(p, msg + 4);
        Py_DECREF(p);
        if (bad) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *v = PyLong_FromUnsignedLongLong(blake2b8(msg, sizeof msg));
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i + 1, v);
    }
    return out;
}

static PyObject *ctx_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "ctx_push(levels, h, k) takes 3 arguments");
        return NULL;
    }
    return ctx_levels(args[0], args[1], args[2]);
}

/* ------------------------------------------------------------------------------------------------ */
/* sanitize_str                                                                                      */
/* ------------------------------------------------------------------------------------------------ */

/* Unicode category Cc other than newline and tab: what core._CONTROL_CHARS matches. */
#define IS_DROPPED_CONTROL(c) ((c) <= 0x08 || ((c) >= 0x0b && (c) <= 0x1f) || ((c) >= 0x7f && (c) <= 0x9f))
#define IS_SURROGATE(c) ((c) >= 0xD800 && (c) <= 0xDFFF)

/* ``text`` without dropped controls and with each lone surrogate as '?' (what encoding to UTF-8 with
 * errors="replace" and decoding gives); ``text`` itself (a new reference) when nothing changes. */
static PyObject *clean_text(PyObject *text)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t first = -1;
    if (kind == PyUnicode_1BYTE_KIND) { /* no surrogates in Latin-1: only the controls to look for */
        const unsigned char *p = (const unsigned char *)data;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (IS_DROPPED_CONTROL(p[i])) {
                first = i;
                break;
            }
        }
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (IS_DROPPED_CONTROL(c) || IS_SURROGATE(c)) {
                first = i;
                break;
            }
        }
    }
    if (first < 0) {
        Py_INCREF(text);
        return text;
    }
    Py_UCS4 *buf = PyMem_New(Py_UCS4, n); /* NULL when n * 4 bytes overflows */
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (IS_DROPPED_CONTROL(c)) {
            continue;
        }
        buf[m++] = IS_SURROGATE(c) ? (Py_UCS4)'?' : c;
    }
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, m);
    PyMem_Free(buf);
    return out;
}

/* sanitize_str(text: exact str, max_chars: exact int) -> sanitize_action(text, max_chars). */
static PyObject *sanitize_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "sanitize_str(text: str, max_chars: int)");
        return NULL;
    }
    PyObject *text = args[0], *max_chars = args[1];
    if (STR_READY(text) < 0) {
        return NULL;
    }
    int overflow = 0;
    long long limit = PyLong_AsLongLongAndOverflow(max_chars, &overflow);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int too_long = overflow > 0 ? 0 : overflow < 0 ? 1 : (long long)n > limit;
    if (too_long) {
        PyObject *problem = PyUnicode_FromFormat("the action is too long (%zd characters; at most %S)", n, max_chars);
        if (problem == NULL) {
            return NULL;
        }
        PyObject *empty = PyUnicode_New(0, 0);
        if (empty == NULL) {
            Py_DECREF(problem);
            return NULL;
        }
        PyObject *res = PyTuple_Pack(2, empty, problem);
        Py_DECREF(empty);
        Py_DECREF(problem);
        return res;
    }
    PyObject *clean = clean_text(text);
    if (clean == NULL) {
        return NULL;
    }
    PyObject *res = PyTuple_Pack(2, clean, Py_None);
    Py_DECREF(clean);
    return res;
}

/* ------------------------------------------------------------------------------------------------ */
/* make_info                                                                                         */
/* ------------------------------------------------------------------------------------------------ */

/* make_info(task_id, step, action_valid, tools, levels, won, score, extra) -> TextEnv._info's dict when
 * the env reports no admissible actions: the standard keys in INFO_KEYS order, then ``extra``'s.
 * ``tools`` is the env's Counter (a dict), ``levels`` its ContextTracker's level list. The caller has
 * checked that ``extra`` does not override a standard key. */
static PyObject *build_info(PyObject *task_id, PyObject *step, PyObject *action_valid, PyObject *tools,
                            PyObject *levels, PyObject *won_obj, PyObject *score_obj, PyObject *extra)
{
    if (!PyDict_Check(tools) || !PyList_Check(levels) || !PyDict_Check(extra)) {
        PyErr_SetString(PyExc_TypeError, "make_info: tools and extra must be dicts, levels a list");
        return NULL;
    }
    int valid = PyObject_IsTrue(action_valid);
    if (valid < 0) {
        return NULL;
    }
    int won = PyObject_IsTrue(won_obj);
    if (won < 0) {
        return NULL;
    }
    /* every object read out of tools / levels is held: int(), float() and a GC allocation (with its
     * finalizers) may run Python code that changes them */
    PyObject *info = NULL, *tool_calls = NULL, *count = NULL, *hashes = NULL, *score = NULL, *state_hash = NULL;
    tool_calls = PyDict_New();
    if (tool_calls == NULL || PyDict_Update(tool_calls, tools) < 0) {
        goto fail;
    }
    PyObject *got = PyDict_GetItemWithError(tools, S_SEARCH); /* borrowed: held across int() */
    if (got == NULL && PyErr_Occurred()) {
        goto fail;
    }
    got = Py_NewRef(got != NULL ? got : ZERO);
    count = PyNumber_Long(got);
    Py_DECREF(got);
    if (count == NULL) {
        goto fail;
    }
    hashes = PyList_GetSlice(levels, 0, PyList_GET_SIZE(levels));
    if (hashes == NULL) {
        goto fail;
    }
    score = PyNumber_Float(score_obj);
    if (score == NULL) {
        goto fail;
    }
    state_hash = Py_NewRef(PyList_GET_SIZE(levels) ? PyList_GET_ITEM(levels, 0) : NO_CONTEXT);
    info = NEW_DICT(9 + PyDict_GET_SIZE(extra));
    if (info == NULL) {
        goto fail;
    }
    if (PyDict_SetItem(info, K_TASK_ID, task_id) < 0 || PyDict_SetItem(info, K_STEP, step) < 0 ||
        PyDict_SetItem(info, K_ACTION_VALID, valid ? Py_True : Py_False) < 0 ||
        PyDict_SetItem(info, K_TOOL_CALLS, tool_calls) < 0 || PyDict_SetItem(info, K_SEARCH_COUNT, count) < 0 ||
        PyDict_SetItem(info, K_STATE_HASH, state_hash) < 0 || PyDict_SetItem(info, K_CONTEXT_HASHES, hashes) < 0 ||
        PyDict_SetItem(info, K_WON, won ? Py_True : Py_False) < 0 || PyDict_SetItem(info, K_SCORE, score) < 0) {
        goto fail;
    }
    if (PyDict_GET_SIZE(extra) && PyDict_Update(info, extra) < 0) {
        goto fail;
    }
    Py_DECREF(tool_calls);
    Py_DECREF(count);
    Py_DECREF(hashes);
    Py_DECREF(score);
    Py_DECREF(state_hash);
    return info;
fail:
    Py_XDECREF(state_hash);
    Py_XDECREF(info);
    Py_XDECREF(tool_calls);
    Py_XDECREF(count);
    Py_XDECREF(hashes);
    Py_XDECREF(score);
    return NULL;
}

static PyObject *make_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "make_info takes 8 arguments");
        return NULL;
    }
    return build_info(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7]);
}

/* ------------------------------------------------------------------------------------------------ */
/* The Search-R1 protocol (stratagym.envs.search_qa.protocol)                                        */
/* ------------------------------------------------------------------------------------------------ */

/* text.find(needle, start) / text.rfind(needle) for an ASCII needle; -2 on error. */
static Py_ssize_t find(PyObject *text, PyObject *needle, Py_ssize_t start)
{
    return PyUnicode_Find(text, needle, start, PY_SSIZE_T_MAX, 1);
}

static Py_ssize_t rfind(PyObject *text, PyObject *needle)
{
    return PyUnicode_Find(text, needle, 0, PY_SSIZE_T_MAX, -1);
}

/* text[start:end].strip() (str.strip() with no argument: Py_UNICODE_ISSPACE at both ends). */
static PyObject *strip_slice(PyObject *text, Py_ssize_t start, Py_ssize_t end)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    while (start < end && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, start))) {
        start++;
    }
    while (end > start && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, end - 1))) {
        end--;
    }
    return PyUnicode_Substring(text, start, end);
}

/* cut_response(text): the cut position (exclusive end), or -2 on error. */
static Py_ssize_t cut_at(PyObject *text)
{
    Py_ssize_t cut = find(text, S_CLOSE_SEARCH, 0);
    if (cut >= 0) {
        return cut + 9;
    }
    if (cut == -2) {
        return -2;
    }
    cut = find(text, S_CLOSE_ANSWER, 0);
    if (cut >= 0) {
        return cut + 9;
    }
    if (cut == -2) {
        return -2;
    }
    return PyUnicode_GET_LENGTH(text);
}

/* _first_action(text): 0 = none, 1 = search, 2 = answer, -1 on error; the content is text[*lo:*hi].
 *
 * The leftmost opening tag that a closing tag of its name follows. The first "<search>" is the only
 * candidate among the searches: if no "</search>" follows it, none follows a later one either; the
 * same for answers. So the answer is whichever of the two first openings qualifies, the earlier one
 * when both do (the Python loop visits the same openings in order and skips the same ones). */
static int first_action_at(PyObject *text, Py_ssize_t *lo, Py_ssize_t *hi)
{
    Py_ssize_t s = find(text, S_OPEN_SEARCH, 0), a, se = -1, ae = -1;
    if (s == -2) {
        return -1;
    }
    if (s >= 0) {
        se = find(text, S_CLOSE_SEARCH, s + 8);
        if (se == -2) {
            return -1;
        }
    }
    a = find(text, S_OPEN_ANSWER, 0);
    if (a == -2) {
        return -1;
    }
    if (a >= 0 && (se < 0 || a < s)) {
        ae = find(text, S_CLOSE_ANSWER, a + 8);
        if (ae == -2) {
            return -1;
        }
    }
    if (se >= 0 && (ae < 0 || s < a)) {
        *lo = s + 8;
        *hi = se;
        return 1;
    }
    if (ae >= 0) {
        *lo = a + 8;
        *hi = ae;
        return 2;
    }
    return 0;
}

/* close_unclosed_tag(text) as a new reference. */
static PyObject *close_tag(PyObject *text)
{
    Py_ssize_t x = find(text, S_CLOSE_SEARCH, 0);
    if (x == -2) {
        return NULL;
    }
    if (x < 0) {
        x = find(text, S_CLOSE_ANSWER, 0);
        if (x == -2) {
            return NULL;
        }
    }
    if (x >= 0) {
        Py_INCREF(text);
        return text;
    }
    /* the last "<search>" / "<answer>": the tags cannot overlap, so _OPEN_TAG's last match is the later one */
    Py_ssize_t s = rfind(text, S_OPEN_SEARCH), a;
    if (s == -2) {
        return NULL;
    }
    a = rfind(text, S_OPEN_ANSWER);
    if (a == -2) {
        return NULL;
    }
    if (s < 0 && a < 0) {
        Py_INCREF(text);
        return text;
    }
    return PyUnicode_Concat(text, s > a ? S_CLOSE_SEARCH : S_CLOSE_ANSWER);
}

static int check_str(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want || !PyUnicode_CheckExact(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s takes an exact str first and %zd arguments", name, want);
        return -1;
    }
    return STR_READY(args[0]);
}

static PyObject *py_cut_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_str(args, nargs, 1, "cut_response") < 0) {
        return NULL;
    }
    Py_ssize_t cut = cut_at(args[0]);
    return cut == -2 ? NULL : PyUnicode_Substring(args[0], 0, cut);
}

static PyObject *py_first_action(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_str(args, nargs, 1, "first_action") < 0) {
        return NULL;
    }
    Py_ssize_t lo = 0, hi = 0;
    int kind = first_action_at(args[0], &lo, &hi);
    if (kind < 0) {
        return NULL;
    }
    if (kind == 0) {
        PyObject *empty = PyUnicode_New(0, 0);
        if (empty == NULL) {
            return NULL;
        }
        PyObject *res = PyTuple_Pack(2, Py_None, empty);
        Py_DECREF(empty);
        return res;
    }
    PyObject *content = PyUnicode_Substring(args[0], lo, hi);
    if (content == NULL) {
        return NULL;
    }
    PyObject *res = PyTuple_Pack(2, kind == 1 ? S_SEARCH : S_ANSWER, content);
    Py_DECREF(content);
    return res;
}

static PyObject *py_close_unclosed_tag(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_str(args, nargs, 1, "close_unclosed_tag") < 0) {
        return NULL;
    }
    return close_tag(args[0]);
}

/* parse_turn(text, max_query_chars, accept_unclosed_tags) -> (kind, text or problem, response). */
static PyObject *parse_turn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_str(args, nargs, 3, "parse_turn") < 0) {
        return NULL;
    }
    PyObject *text = args[0], *max_query_chars = args[1];
    int accept = PyObject_IsTrue(args[2]);
    if (accept < 0) {
        return NULL;
    }
    PyObject *closed = NULL, *response = NULL, *value = NULL, *res = NULL;
    if (accept) {
        closed = close_tag(text);
        if (closed == NULL || STR_READY(closed) < 0) {
            goto done;
        }
        text = closed;
    }
    Py_ssize_t cut = cut_at(text);
    if (cut == -2) {
        goto done;
    }
    response = PyUnicode_Substring(text, 0, cut);
    if (response == NULL) {
        goto done;
    }
    Py_ssize_t lo = 0, hi = 0;
    int kind = first_action_at(response, &lo, &hi);
    if (kind < 0) {
        goto done;
    }
    if (kind == 0) {
        res = PyTuple_Pack(3, S_INVALID, S_NO_ACTION, response);
        goto done;
    }
    if (kind == 2) {
        /* _ANSWER.findall(response)[-1]: the last of the non-overlapping <answer>..</answer> pairs, the
         * first of which starts at the first "<answer>" (the first action is an answer) */
        Py_ssize_t pos = hi + 9; /* after the first pair's "</answer>" */
        for (;;) {
            Py_ssize_t a = find(response, S_OPEN_ANSWER, pos);
            if (a == -2) {
                goto done;
            }
            if (a < 0) {
                break;
            }
            Py_ssize_t e = find(response, S_CLOSE_ANSWER, a + 8);
            if (e == -2) {
                goto done;
            }
            if (e < 0) {
                break;
            }
            lo = a + 8;
            hi = e;
            pos = e + 9;
        }
        value = strip_slice(response, lo, hi);
        if (value != NULL) {
            res = PyTuple_Pack(3, S_ANSWER, value, response);
        }
        goto done;
    }
    value = strip_slice(response, lo, hi);
    if (value == NULL) {
        goto done;
    }
    if (max_query_chars != Py_None) {
        Py_ssize_t qlen = PyUnicode_GET_LENGTH(value);
        PyObject *len_obj = PyLong_FromSsize_t(qlen);
        if (len_obj == NULL) {
            goto done;
        }
        int longer = PyObject_RichCompareBool(len_obj, max_query_chars, Py_GT);
        Py_DECREF(len_obj);
        if (longer < 0) {
            goto done;
        }
        if (longer) {
            PyObject *shown = PyObject_Format(max_query_chars, NULL);
            if (shown == NULL) {
                goto done;
            }
            PyObject *problem =
                PyUnicode_FromFormat("the search query is too long (%zd > %U characters)", qlen, shown);
            Py_DECREF(shown);
            if (problem != NULL) {
                res = PyTuple_Pack(3, S_INVALID, problem, response);
                Py_DECREF(problem);
            }
            goto done;
        }
    }
    res = PyTuple_Pack(3, S_SEARCH, value, response);
done:
    Py_XDECREF(closed);
    Py_XDECREF(response);
    Py_XDECREF(value);
    return res;
}

/* ------------------------------------------------------------------------------------------------ */
/* Module                                                                                            */
/* ------------------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"digest8", (PyCFunction)digest8, METH_O, "core._digest: BLAKE2b-64 of bytes as a 63-bit int."},
    {"stable_hash", (PyCFunction)stable_hash, METH_O, "core.stable_hash for an exact str."},
    {"assemble_block", (PyCFunction)(void (*)(void))assemble_block, METH_FASTCALL,
     "assemble_block(pieces, contents): PassageText.block's join of known passages, or None / NotImplemented."},
    {"format_block", (PyCFunction)format_block, METH_O,
     "format_block(contents): (information_block(format_passages(contents)), its stable_hash), or NotImplemented."},
    {"ctx_push", (PyCFunction)(void (*)(void))ctx_push, METH_FASTCALL,
     "ctx_push(levels, h, k): ContextTracker.push_hash's new level list."},
    {"sanitize_str", (PyCFunction)(void (*)(void))sanitize_str, METH_FASTCALL,
     "sanitize_str(text, max_chars): sanitize_action for an exact str and an exact int."},
    {"make_info", (PyCFunction)(void (*)(void))make_info, METH_FASTCALL,
     "make_info(task_id, step, action_valid, tools, levels, won, score, extra): TextEnv._info's dict."},
    {"cut_response", (PyCFunction)(void (*)(void))py_cut_response, METH_FASTCALL, "protocol.cut_response (exact str)."},
    {"first_action", (PyCFunction)(void (*)(void))py_first_action, METH_FASTCALL, "protocol._first_action (exact str)."},
    {"close_unclosed_tag", (PyCFunction)(void (*)(void))py_close_unclosed_tag, METH_FASTCALL,
     "protocol.close_unclosed_tag (exact str)."},
    {"parse_turn", (PyCFunction)(void (*)(void))parse_turn, METH_FASTCALL,
     "parse_turn(text, max_query_chars, accept_unclosed_tags): protocol.parse_turn (exact str)."},
    {NULL, NULL, 0, NULL},
};

/* What the Python side (speedups.API) must match: raise it whenever a function is added, removed or
   changes its arguments, so a stale build left in a source tree is refused instead of half-used. */
#define SPEEDUPS_API 2

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "C twins of the pure functions on a text env's step hot path (see stratagym.envs.speedups).", -1, methods,
};

static int intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__speedups(void)
{
    if (intern(&S_SEARCH, "search") < 0 || intern(&S_ANSWER, "answer") < 0 || intern(&S_INVALID, "invalid") < 0 ||
        intern(&S_OPEN_SEARCH, "<search>") < 0 || intern(&S_OPEN_ANSWER, "<answer>") < 0 ||
        intern(&S_CLOSE_SEARCH, "</search>") < 0 || intern(&S_CLOSE_ANSWER, "</answer>") < 0 ||
        intern(&S_NO_ACTION, "the turn has no complete <search>...</search> or <answer>...</answer>") < 0 ||
        intern(&S_LITTLE, "little") < 0 ||
        intern(&K_TASK_ID, "task_id") < 0 || intern(&K_STEP, "step") < 0 || intern(&K_ACTION_VALID, "action_valid") < 0 ||
        intern(&K_TOOL_CALLS, "tool_calls") < 0 || intern(&K_SEARCH_COUNT, "search_count") < 0 ||
        intern(&K_STATE_HASH, "state_hash") < 0 || intern(&K_CONTEXT_HASHES, "context_hashes") < 0 ||
        intern(&K_WON, "won") < 0 || intern(&K_SCORE, "score") < 0) {
        return NULL;
    }
    if (intern(&S_NFC, "NFC") < 0) {
        return NULL;
    }
    PyObject *unicodedata = PyImport_ImportModule("unicodedata");
    if (unicodedata == NULL) {
        return NULL;
    }
    UNICODEDATA_NORMALIZE = PyObject_GetAttrString(unicodedata, "normalize");
    Py_DECREF(unicodedata);
    if (UNICODEDATA_NORMALIZE == NULL) {
        return NULL;
    }
    for (int c = 0; c < 128; c++) {
        ASCII_SPACE[c] = Py_UNICODE_ISSPACE((Py_UCS4)c) ? 1 : 0;
    }
    ZERO = PyLong_FromLong(0);
    NO_CONTEXT = PyLong_FromLong(-1);
    if (ZERO == NULL || NO_CONTEXT == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "API", SPEEDUPS_API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

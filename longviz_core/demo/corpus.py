"""The demo corpus: deterministic long "papers" of two classes (artificial intelligence vs programming languages).

It mirrors the paper's "papers" dataset; the training (demo/train.py) and the restored demo (demo/shipped.py)
both regenerate it from a fixed seed.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pandas as pd

# Vocabulary per class.  Topics are plural noun phrases, objects singular ones with an article.
_VOCAB = {
    1: {  # artificial intelligence
        "field": ["machine learning", "artificial intelligence", "deep learning", "AI"],
        "topic": [
            "neural networks", "deep learning", "reinforcement learning", "language models",
            "transformers", "convolutional networks", "graph neural networks", "generative models",
            "multi-agent systems", "knowledge graphs", "automated planning", "computer vision",
            "speech recognition", "heuristic search", "probabilistic reasoning", "representation learning",
            "few-shot learning", "imitation learning", "attention mechanisms", "recurrent networks",
            "Bayesian neural networks", "autonomous agents", "contrastive learning", "active learning",
            "meta-learning", "variational autoencoders", "diffusion models", "game playing agents",
        ],
        "object": [
            "the agent", "the policy", "the classifier", "the reward function", "the embedding layer",
            "the loss function", "the training set", "the neural network", "the learned representation",
            "the attention layer", "the decoder", "the encoder", "the value function", "the search tree",
            "the knowledge base", "the planner", "the hidden layer", "the discriminator", "the generator",
            "the replay buffer", "the learning rate", "the activation function", "the softmax layer",
            "the reasoning module", "the perception module", "the gradient estimator",
        ],
        "verb": [
            "learns faster", "generalizes well", "converges", "explores the environment", "predicts the label",
            "is trained end to end", "overfits the training data", "reasons about the goal",
            "maximizes the expected reward", "minimizes the training loss", "is fine-tuned",
            "adapts to new tasks", "memorizes rare examples", "recognizes the objects",
        ],
        "adj": [
            "neural", "stochastic", "supervised", "unsupervised", "adversarial", "pretrained", "generative",
            "autonomous", "intelligent", "learned", "deep", "self-supervised", "multimodal", "robust",
        ],
        "metric": [
            "accuracy", "F1 score", "average reward", "perplexity", "BLEU score", "top-1 error",
            "success rate", "test loss", "sample efficiency", "area under the curve",
        ],
        "data": [
            "ImageNet", "CIFAR-10", "MNIST", "the Atari benchmark", "SQuAD", "GLUE", "the MuJoCo suite",
            "Penn Treebank", "COCO", "WikiText-103", "the StarCraft environment", "a grid world",
        ],
        "activity": [
            "training", "learning", "inference on the test set", "exploration", "planning", "classification",
            "pretraining", "fine-tuning", "backpropagation", "gradient descent", "hyperparameter tuning",
        ],
        "snippet": [
            "loss = -log p(y | x)", "theta <- theta - eta * grad(L)", "Q(s, a) <- r + gamma * max Q(s', a')",
            "h_t = tanh(W x_t + U h_(t-1))", "softmax(Q K^T / sqrt(d)) V",
        ],
        "concept": [
            "policy gradients", "Monte Carlo tree search", "beam search", "batch normalization", "dropout",
            "word embeddings", "knowledge distillation", "curriculum learning", "self-play", "sparse rewards",
            "chain-of-thought prompting", "question answering", "image segmentation", "object detection",
            "sentiment analysis", "machine translation", "data augmentation", "early stopping",
            "weight decay", "temporal difference learning", "actor-critic methods", "latent variables",
            "mixture of experts", "residual connections", "layer normalization", "label smoothing",
            "exploration bonuses", "reward shaping", "transfer learning", "domain adaptation",
            "adversarial examples", "saliency maps", "feature attribution", "minimax search",
            "constraint satisfaction problems", "belief propagation", "Markov decision processes",
            "hidden Markov models", "support vector machines", "decision trees", "random forests",
            "k-means clustering", "principal component analysis", "autoencoders", "tokenization",
        ],
    },
    0: {  # programming languages
        "field": ["programming languages", "compiler construction", "PL", "software verification"],
        "topic": [
            "type systems", "optimizing compilers", "program analysis", "formal semantics",
            "functional programming", "dependent types", "gradual typing", "memory safety",
            "concurrent programming", "program verification", "domain-specific languages",
            "garbage collection", "just-in-time compilation", "refinement types", "effect systems",
            "abstract interpretation", "the lambda calculus", "parsing algorithms", "ownership types",
            "macro systems", "session types", "separation logic", "object-oriented languages",
            "logic programming", "incremental compilation", "module systems", "polymorphic type inference",
        ],
        "object": [
            "the compiler", "the type checker", "the parser", "the interpreter", "the abstract syntax tree",
            "the intermediate representation", "the runtime system", "the garbage collector",
            "the type system", "the operational semantics", "the borrow checker", "the code generator",
            "the linker", "the macro expander", "the static analyzer", "the core calculus",
            "the register allocator", "the virtual machine", "the bytecode verifier", "the grammar",
            "the standard library", "the source program", "the denotational semantics", "the proof assistant",
        ],
        "verb": [
            "type-checks the program", "compiles the source code", "is well-typed", "is sound",
            "reduces to a value", "is inlined", "evaluates the expression", "is elaborated",
            "terminates", "is desugared", "rejects ill-typed programs", "preserves the semantics",
            "allocates fewer registers", "eliminates dead code",
        ],
        "adj": [
            "polymorphic", "well-typed", "functional", "imperative", "statically typed", "dynamically typed",
            "lazy", "strict", "higher-order", "dependently typed", "linear", "compositional", "type-safe",
        ],
        "metric": [
            "compile time", "code size", "throughput", "lines of code", "number of type errors",
            "speedup", "peak memory", "annotation burden", "proof size", "binary size",
        ],
        "data": [
            "SPECint", "the DaCapo suite", "the Computer Language Benchmarks Game", "Coq", "Haskell",
            "OCaml", "Rust", "Java", "Scala", "LLVM", "the GHC test suite", "a corpus of C programs",
        ],
        "activity": [
            "compilation", "type checking", "type inference", "parsing", "code generation", "linking",
            "program transformation", "register allocation", "static analysis", "interpretation",
            "proof checking",
        ],
        "snippet": [
            "let x = f y in g x", "fun (x : int) -> x + 1", "fn main() { let v = vec![1, 2, 3]; }",
            "Gamma |- e : tau", "map f (x :: xs) = f x :: map f xs",
        ],
        "concept": [
            "tail calls", "first-class continuations", "monads", "closures", "pattern matching",
            "algebraic data types", "type classes", "escape analysis", "loop unrolling", "SSA form",
            "alias analysis", "symbolic execution", "Hoare logic", "bidirectional type checking",
            "row polymorphism", "generics", "coroutines", "macro hygiene", "lexical scoping",
            "dynamic dispatch", "virtual method tables", "reference counting", "region inference",
            "constant folding", "partial evaluation", "staged compilation", "defunctionalization",
            "CPS conversion", "lambda lifting", "subtyping", "existential types", "higher-kinded types",
            "linear logic", "typestate", "data races", "atomic transactions", "weak memory models",
            "undefined behavior", "bounds checks", "foreign function interfaces", "hot code reloading",
            "tree-walking interpreters", "bytecode compilers", "peephole optimization", "operator overloading",
        ],
    },
}

# Research vocabulary both classes use; the ambiguous terms mean different things in each field.
_SHARED = {
    "noun": [
        "approach", "method", "framework", "evaluation", "benchmark", "implementation", "prototype",
        "algorithm", "system", "technique", "formalism", "tool", "baseline", "design", "library",
        "architecture", "pipeline", "heuristic", "extension",
    ],
    "ambiguous": [
        "model", "inference", "optimization", "search", "representation", "abstraction",
        "program synthesis", "specification", "graph", "constraint solving", "logic", "kernel",
        "tree", "language", "semantics of the model", "execution trace", "generalization",
    ],
    "quality": [
        "simple", "efficient", "scalable", "practical", "general", "novel", "modular", "precise",
        "expressive", "lightweight", "principled", "incremental", "flexible",
    ],
    "author": [
        "Smith", "Chen", "Garcia", "Nguyen", "Kumar", "Okafor", "Rossi", "Tanaka", "Kowalski",
        "Johnson", "Dubois", "Silva", "Ivanova", "Park", "Cohen", "Larsen", "Haddad", "Moreau",
        "Novak", "Patel", "Schmidt", "Yamamoto", "Andersson", "Fischer", "Lopez", "Wang", "Li",
        "Brown", "Miller", "Hoffmann", "Costa", "Eriksson", "Kim", "Zhang", "Oliveira", "Murphy",
        "Abadi", "Barendregt", "Castagna", "Danvy", "Engelbrecht", "Felleisen", "Gordon", "Harper",
        "Igarashi", "Jagannathan", "Krishnamurthi", "Leroy", "Morrisett", "Nielson", "Odersky", "Pierce",
        "Quinlan", "Reynolds", "Sewell", "Thiemann", "Ullman", "Vitek", "Wadler", "Xu", "Yoshida",
        "Zdancewic", "Bengio", "Hinton", "LeCun", "Sutton", "Barto", "Russell", "Norvig", "Pearl",
        "Koller", "Goodfellow", "Schmidhuber", "Silver", "Mnih", "Vaswani", "Hochreiter", "Jordan",
        "Ghahramani", "Bishop", "Murphy", "Tesauro", "Rumelhart", "Minsky", "McCarthy", "Nilsson",
        "Fikes", "Kaelbling", "Thrun", "Domingos", "Mitchell", "Vapnik", "Breiman", "Friedman",
    ],
    "connective": [
        "Moreover, ", "In particular, ", "Furthermore, ", "Interestingly, ", "Consequently, ", "In practice, ",
        "As a result, ", "By contrast, ", "Similarly, ", "Notably, ", "In addition, ", "Surprisingly, ",
    ],
    "venue": ["ICML", "NeurIPS", "POPL", "PLDI", "AAAI", "OOPSLA", "ICLR", "ICFP", "IJCAI", "ECOOP"],
}

_SECTIONS = ["Introduction", "Background", "Approach", "Evaluation", "Related Work", "Discussion", "Conclusion"]
_SECTION_WEIGHTS = [0.18, 0.12, 0.24, 0.2, 0.12, 0.08, 0.06]

# Templates with class slots ({topic}, {object}, ...) filled from one field's vocabulary.
_CLASS_TEMPLATES = [
    "In this paper, we present a {quality} {noun} for {topic} that improves {metric} by {pct}%.",
    "Recent work on {topic} has shown that {object} {verb} when a {adj} {noun} is used {cite}.",
    "We evaluate our {noun} on {data} and report an average {metric} of {score}.",
    "Table {n} shows that {object} {verb} in {n2} out of {n3} cases.",
    "Unlike prior work {cite}, our {noun} does not require {object2} during {activity}.",
    "The key idea is that {object} can be expressed as a {adj} {noun}, which makes {topic} more {quality}.",
    "Since {year}, {topic} has become a central topic of the {field} community.",
    "Section {n} describes {object}, and Section {n2} discusses the limitations of {activity}.",
    "However, {object} {verb} only if {object2} is {adj}, which is rarely the case in practice.",
    "Figure {n} illustrates how {object} interacts with {object2} during {activity}.",
    "We prove that {object} {verb} under mild assumptions (Theorem {n}).",
    "These results suggest that {adj} {topic} are a promising direction for {field} research.",
    "As noted by {author} et al. ({year}), {topic} and {topic2} are closely related.",
    "Compared with the {noun} of {author} and {author2} ({year}), ours is {float} times faster on {data}.",
    "To our knowledge, this is the first {noun} that combines {topic} with {topic2}.",
    "A typical example is the expression {snippet}, where {object} {verb}.",
    "Our main contribution is a {quality} account of {activity} for {topic}.",
    "In {pct}% of the runs, {object} {verb} after fewer than {n3} iterations.",
    "The {metric} on {data} changes from {score} to {score2} when {object} is {adj}.",
    "Most {field} systems treat {object} as a black box, but we argue that {object2} matters more.",
    "We implemented {activity} as part of {object} and measured its {metric} on {data}.",
    "Previous {noun}s for {topic} {cite} rely on hand-written rules for {activity}.",
    "Intuitively, {object} {verb} because {object2} captures the structure of {topic}.",
    "The {adj} variant of {object} reduces the {metric} of {activity} by a factor of {n}.",
    "Work on {topic} at {venue} {year} focused on {activity} rather than {topic2}.",
    "We combine {concept} with {concept2} to make {activity} more {quality}.",
    "A well-known weakness of {concept} is that {object} {verb} only on small inputs.",
    "Our experiments with {concept} on {data} confirm the findings of {author} ({year}).",
    "The second half of the paper studies {concept} in the context of {topic}.",
    "Without {concept}, the {metric} of {object} degrades by {pct}%.",
    "Following {author} et al. ({year}), we treat {concept} as a special case of {concept2}.",
    "An ablation shows that {concept} accounts for most of the gain in {metric}.",
    "Both {concept} and {concept2} have been studied extensively since the {decade}s.",
]

# Sentences with no class vocabulary: boilerplate every paper has.
_SHARED_TEMPLATES = [
    "The rest of this paper is organized as follows.",
    "All experiments were run on a machine with {cores} cores and {n4} GB of memory.",
    "We discuss threats to validity in Section {n}.",
    "This work was supported in part by grant {grant}.",
    "The results are summarized in Table {n} and discussed below.",
    "We thank the anonymous reviewers for their helpful comments.",
    "Each experiment was repeated {n} times, and we report the median of the runs.",
    "Our {noun} is {quality} and {quality2}, and it is available as open source.",
    "The {noun} of {author} et al. ({year}) is the closest to ours.",
    "In the worst case, the running time of the {noun} is quadratic in the size of the input.",
    "We leave a more detailed comparison with {author} ({year}) to future work.",
    "This section gives an overview of the {noun} and introduces the notation.",
    "The main limitation of this {noun} is that it assumes a fixed {ambiguous}.",
    "A more {quality} {ambiguous} would require a different {noun}.",
    "We first define the {ambiguous}, then describe the {noun} that uses it.",
    "Both the {ambiguous} and the {ambiguous2} are computed once, before the main loop.",
    "On average, the {noun} took {float} seconds per input, with a standard deviation of {float2}.",
    "The difference is statistically significant (p < 0.0{n}).",
    "Appendix {n} contains the full proofs and additional results.",
    "We now turn to the question of how the {noun} behaves on larger inputs.",
    "In contrast, a naive {noun} would need {n3} steps for the same input.",
    "This observation motivates the {quality} {noun} described in the next section.",
    "Note that the {ambiguous} is not unique, but any choice works for our purposes.",
    "For clarity, we omit some details here; they can be found in the extended version.",
    "Our {noun} builds on the {ambiguous} introduced by {author} et al. ({year}).",
    "Overall, the {noun} is {float} times faster than the {noun2} {cite}.",
    "The code and data are available from the authors upon request.",
    "We use the default settings for all parameters unless stated otherwise.",
]

# Bridging sentences mention both fields at once; they occur in either class.
_BRIDGE_TEMPLATES = [
    "Machine learning has also been applied to {pl_topic} {cite}.",
    "We use {ai_topic} to guide {pl_object}, which is a growing trend.",
    "Probabilistic programming languages make {ai_topic} easier to express {cite}.",
    "Neural program synthesis connects {ai_topic} with {pl_topic}.",
    "Some authors train {ai_object} to predict the output of {pl_object} {cite}.",
    "Learned heuristics for {pl_activity} are an active area of research.",
]


def _tokens_estimate(text: str) -> int:
    """Words and punctuation marks: close to the byte-level BPE count on this corpus."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def _citation(rng: random.Random) -> str:
    a = _SHARED["author"]
    year = rng.randint(1995, 2023)
    style = rng.random()
    if style < 0.45:
        return f"({rng.choice(a)} et al., {year})"
    if style < 0.7:
        first, second = rng.sample(a, 2)
        return f"({first} and {second}, {year})"
    if style < 0.85:
        return f"({rng.choice(a)}, {year})"
    return f"[{rng.randint(1, 60)}]"


def _fill(template: str, rng: random.Random, vocab: dict, other: dict) -> str:
    """Fill every {slot} of a template from one field's vocabulary (other: the opposite field)."""

    values = {
        "pct": str(rng.choice([rng.randint(2, 60), round(rng.uniform(1, 40), 1)])),
        "float": f"{rng.uniform(0.1, 9.9):.2f}",
        "float2": f"{rng.uniform(0.1, 9.9):.2f}",
        "n": str(rng.randint(1, 9)),
        "n2": str(rng.randint(2, 12)),
        "n3": str(rng.randint(40, 500)),
        "n4": str(rng.choice([16, 32, 64, 128, 256])),
        "cores": str(rng.choice([4, 8, 16, 32, 64])),
        "score": f"{rng.uniform(0.4, 0.99):.3f}",
        "score2": f"{rng.uniform(0.4, 0.99):.3f}",
        "year": str(rng.randint(1995, 2023)),
        "decade": str(rng.choice([1970, 1980, 1990, 2000])),
        "cite": _citation(rng),
        "grant": f"{rng.choice(['NSF', 'ERC', 'DFG', 'NSERC', 'JSPS'])}-{rng.randint(1000, 99999)}",
    }
    for key in ("topic", "object", "adj", "verb", "metric", "data", "activity", "field", "snippet", "concept"):
        values[key] = rng.choice(vocab[key])
        values[key + "2"] = rng.choice(vocab[key])
    for key in ("noun", "quality", "ambiguous", "author", "venue"):
        values[key] = rng.choice(_SHARED[key])
        values[key + "2"] = rng.choice(_SHARED[key])
    ai, pl = (vocab, other) if vocab is _VOCAB[1] else (other, vocab)
    values.update(
        ai_topic=rng.choice(ai["topic"]), ai_object=rng.choice(ai["object"]),
        pl_topic=rng.choice(pl["topic"]), pl_object=rng.choice(pl["object"]),
        pl_activity=rng.choice(pl["activity"]),
    )
    sentence = template.format(**values)
    return sentence[0].upper() + sentence[1:]


def _sentence(rng: random.Random, label: int, mix: tuple[float, float, float]) -> str:
    """One sentence: own class, other class (the confusing ones), bridging, or shared boilerplate."""
    own, cross, bridge = mix
    vocab, other = _VOCAB[label], _VOCAB[1 - label]
    u = rng.random()
    if u < own:
        sentence = _fill(rng.choice(_CLASS_TEMPLATES), rng, vocab, other)
    elif u < own + cross:
        sentence = _fill(rng.choice(_CLASS_TEMPLATES), rng, other, vocab)
    elif u < own + cross + bridge:
        sentence = _fill(rng.choice(_BRIDGE_TEMPLATES), rng, vocab, other)
    else:
        sentence = _fill(rng.choice(_SHARED_TEMPLATES), rng, vocab, other)
    if rng.random() < 0.15 and sentence[1].islower():  # keep acronyms such as "AI" capitalised
        sentence = rng.choice(_SHARED["connective"]) + sentence[0].lower() + sentence[1:]
    return sentence


def _title(rng: random.Random, label: int) -> str:
    v = _VOCAB[label]
    forms = [
        "Towards {quality} {topic}: a {noun} for {activity}",
        "{Quality} {activity} with {adj} {noun}s",
        "On the {ambiguous} of {topic}",
        "{Topic} revisited: lessons from {data}",
    ]
    form = rng.choice(forms)
    quality, topic = rng.choice(_SHARED["quality"]), rng.choice(v["topic"])
    title = form.format(
        quality=quality, Quality=quality.capitalize(), topic=topic, Topic=topic[0].upper() + topic[1:],
        noun=rng.choice(_SHARED["noun"]), activity=rng.choice(v["activity"]), adj=rng.choice(v["adj"]),
        ambiguous=rng.choice(_SHARED["ambiguous"]), data=rng.choice(v["data"]),
    )
    return title[0].upper() + title[1:]


def _document(rng: random.Random, label: int, target_tokens: int) -> str:
    """A paper-shaped document: title, abstract, numbered sections of paragraphs."""
    # Per-document mixture: how much own-class, other-class and bridging prose; the rest is boilerplate.
    # One document in eight is hard: barely more own-class than other-class prose.
    own = rng.uniform(0.3, 0.6)
    if rng.random() < 0.125:
        own = rng.uniform(0.22, 0.32)
        cross = own * rng.uniform(0.6, 0.85)
    else:
        cross = rng.uniform(0.03, min(0.25, own * 0.55))
    bridge = rng.uniform(0.02, 0.08)
    mix = (own, cross, bridge)

    title = _title(rng, label)
    abstract = " ".join(_sentence(rng, label, mix) for _ in range(rng.randint(4, 6)))
    parts = [title, "", "Abstract", abstract, ""]
    used = _tokens_estimate(title) + 1 + _tokens_estimate(abstract)
    budget = max(target_tokens - used, 0)
    # Sections share the budget by weight; sentence by sentence, so the target is overshot by < 1 sentence.
    for number, (name, weight) in enumerate(zip(_SECTIONS, _SECTION_WEIGHTS), start=1):
        heading = f"{number} {name}"
        parts.append(heading)
        spent, section_budget = _tokens_estimate(heading), budget * weight
        while spent < section_budget:
            paragraph = []
            for _ in range(rng.randint(3, 7)):
                paragraph.append(_sentence(rng, label, mix))
                spent += _tokens_estimate(paragraph[-1])
                if spent >= section_budget:
                    break
            parts.append(" ".join(paragraph))
        parts.append("")
    return "\n".join(parts).strip() + "\n"


def generate_corpus(n_docs: int = 240, seed: int = 0) -> pd.DataFrame:
    """Deterministic two-class corpus of long paper-like documents.

    Columns: text (str), label (int: 0 programming_languages, 1 artificial_intelligence),
    split ('train' | 'test'); classes are balanced and a quarter of each class is held out.
    """
    if n_docs < 8 or n_docs % 4:
        raise ValueError(f"n_docs must be a multiple of 4 and at least 8, got {n_docs}")
    rng = random.Random(seed)
    labels = [i % 2 for i in range(n_docs)]
    rng.shuffle(labels)
    # Lengths spread over the whole 600-3,000 token range so the 2,048-token truncation matters.
    texts = [_document(rng, label, rng.randint(680, 2800)) for label in labels]
    split = np.full(n_docs, "train", dtype=object)
    for label in (0, 1):
        idx = [i for i, lab in enumerate(labels) if lab == label]
        held = rng.sample(idx, len(idx) // 4)
        split[held] = "test"
    return pd.DataFrame({"text": texts, "label": np.asarray(labels, dtype=np.int64), "split": split.astype(str)})

"""② Spec → evaluator: one record in, one result out (LLM judges, pipelines, computed metrics).

Submodules are imported when used: reading the verdict schema of a spec (``greval.judge.verdict``) must not
import LangChain.
"""

"""Celery tasks of the printing app: thin, one service call each."""

from celery import shared_task

from . import services


@shared_task(name="printing.tasks.purge_print_content", ignore_result=True)
def purge_print_content() -> int:
    return services.print_job_purge_content()

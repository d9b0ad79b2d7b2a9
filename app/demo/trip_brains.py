"""The brains of the trips tree: `trip-planner` asks `itinerary` for a stay, `itinerary` picks
the best rated hotel and has `booker` book it, and `book` waits for a person's approval two
levels below the root."""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import ValidationError

from app.demo.catalogue import HOTELS
from app.demo.names import BOOK, BOOKER, FIND_HOTELS, ITINERARY, TRIP_PLANNER, subagent_tool
from app.demo.schemas import (
    MAX_NIGHTS,
    Booking,
    BookingRequest,
    Confirmation,
    Hotels,
    TripPlan,
    TripRequest,
)
from app.demo.turns import (
    Brain,
    SchemaT,
    current_turn,
    finish,
    result,
    task_text,
    tool_results,
)
from app.errors import RunError
from app.models import ModelRequest, ModelResponse, ToolCall
from app.protocol import ToolMessage, UserMessage

DEFAULT_NIGHTS = 2
"""The stay planned when the message does not say how long."""

TRIP_HELP = (
    "I plan a stay and book the hotel, once you approve the booking. Tell me the city and how "
    f'many nights, for example: "Plan a trip: 3 nights in Lisbon". Cities: {", ".join(HOTELS)}.'
)
"""The planner's answer when the message names no city of the catalogue."""

TRIP_PLAN = "I'll have the itinerary agent pick a hotel; its booker will ask you to approve it."
"""What the planner says as it delegates."""

_NIGHTS = re.compile(r"\b(\d{1,3})\s*nights?\b", re.IGNORECASE)


def trip_request(message: str) -> TripRequest | str:
    """The stay a message asks for, or what to answer instead."""
    city = next((c for c in HOTELS if re.search(rf"\b{c}\b", message, re.IGNORECASE)), None)
    if city is None:
        return TRIP_HELP
    found = _NIGHTS.search(message)
    nights = int(found.group(1)) if found else DEFAULT_NIGHTS
    if not 1 <= nights <= MAX_NIGHTS:
        return f"I book stays of 1 to {MAX_NIGHTS} nights: how many would you like?"
    return TripRequest(city=city, nights=nights)


def trip_planner_brain(request: ModelRequest) -> ModelResponse:
    """`trip-planner`: delegate the stay to `itinerary`, then report the plan and booking."""
    turn = current_turn(request.messages)
    results = tool_results(turn)
    if subagent_tool(ITINERARY) in results:
        return ModelResponse(text=trip_report(results[subagent_tool(ITINERARY)]))
    message = turn[0].content if turn and isinstance(turn[0], UserMessage) else ""
    asked = trip_request(message)
    if isinstance(asked, str):
        return ModelResponse(text=asked)
    return ModelResponse(
        text=TRIP_PLAN, tool_calls=[ToolCall(subagent_tool(ITINERARY), asked.model_dump())]
    )


def trip_report(message: ToolMessage) -> str:
    """The planner's answer from the itinerary's result."""
    if message.error is not None:
        return f"I could not plan the trip: {message.error}"
    try:
        plan = TripPlan.model_validate(message.result)
    except ValidationError:
        return "I could not plan the trip: the itinerary's answer did not match its schema."
    hotel, booking = plan.hotel, plan.booking
    lines = [
        f"Your trip: {plan.nights} nights in {plan.city} at {hotel.name} "
        f"(rated {hotel.rating:g}, {hotel.price_per_night} euros a night)."
    ]
    if booking.booked:
        lines.append(f"Booked: reference {booking.confirmation}, {booking.total} euros in all.")
    else:
        lines.append(f"Not booked: {booking.note}")
    return "\n".join(lines)


def _task(request: ModelRequest, schema: type[SchemaT]) -> SchemaT:
    """A child's task: its parent's arguments, as JSON in its first message."""
    try:
        return schema.model_validate_json(task_text(request))
    except ValidationError as exc:
        raise RunError(f"The task is not a {schema.__name__}: {exc}") from None


def itinerary_brain(request: ModelRequest) -> ModelResponse:
    """`itinerary`: list the city's hotels, have the best rated booked, finish with the plan."""
    trip = _task(request, TripRequest)
    results = tool_results(request.messages)
    if FIND_HOTELS not in results:
        return ModelResponse(
            text=f"I'll look up the hotels in {trip.city}.",
            tool_calls=[ToolCall(FIND_HOTELS, trip.model_dump())],
        )
    hotels = result(results, FIND_HOTELS, Hotels)
    if not hotels.hotels:
        raise RunError(f"{FIND_HOTELS} found no hotel in {trip.city}")
    best = hotels.hotels[0]
    booked = results.get(subagent_tool(BOOKER))
    if booked is None:
        wanted = BookingRequest(hotel=best.name, city=hotels.city, nights=trip.nights)
        return ModelResponse(
            text=f"{best.name} is the best rated ({best.rating:g}, {best.price_per_night} euros "
            "a night): I'll have the booker book it.",
            tool_calls=[ToolCall(subagent_tool(BOOKER), wanted.model_dump())],
        )
    if booked.error is not None:
        booking = Booking(booked=False, hotel=best.name, note=booked.error)
    else:
        booking = Booking.model_validate(booked.result)
    plan = TripPlan(city=hotels.city, nights=trip.nights, hotel=best, booking=booking)
    return finish("The plan is ready.", plan)


def booker_brain(request: ModelRequest) -> ModelResponse:
    """`booker`: call `book` (it waits for approval), then finish with the booking or why
    there is none."""
    wanted = _task(request, BookingRequest)
    results = tool_results(request.messages)
    booked = results.get(BOOK)
    if booked is None:
        return ModelResponse(
            text=f"Booking {wanted.hotel} for {wanted.nights} nights: this needs your approval.",
            tool_calls=[ToolCall(BOOK, wanted.model_dump())],
        )
    if booked.error is not None:
        return finish(
            "The booking was not made.",
            Booking(booked=False, hotel=wanted.hotel, note=booked.error),
        )
    done = Confirmation.model_validate(booked.result)
    return finish(
        f"Booked: reference {done.confirmation}.",
        Booking(booked=True, hotel=done.hotel, confirmation=done.confirmation, total=done.total),
    )


TRIP_BRAINS: Mapping[str, Brain] = {
    TRIP_PLANNER: trip_planner_brain,
    ITINERARY: itinerary_brain,
    BOOKER: booker_brain,
}
"""Each agent of the trips tree's brain, by agent name."""
